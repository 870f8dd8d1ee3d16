/**
 * Builds the dashboard in memory with esbuild: the server calls buildDashboard() once and serves
 * the files at /dashboard. No inline script or style anywhere, so the page works under
 * `Content-Security-Policy: default-src 'self'`.
 */
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

export interface DashboardFile {
  body: string;
  type: string;
}

const HERE = dirname(fileURLToPath(import.meta.url));
/** The app's sources: next to this file, or next to its folder when it runs built (apps/dashboard/dist/build.js). */
const SRC = join(basename(HERE) === 'dist' ? dirname(HERE) : HERE, 'src');

let cached: Promise<Map<string, DashboardFile>> | undefined;

/**
 * The files to serve, keyed by path relative to /dashboard: '/' (index.html), '/app.js',
 * '/app.css' and '/favicon.svg'. Built once per process.
 */
export function buildDashboard(): Promise<Map<string, DashboardFile>> {
  cached ??= compile().catch((err: unknown) => {
    cached = undefined;
    throw err;
  });
  return cached;
}

async function compile(): Promise<Map<string, DashboardFile>> {
  const result = await build({
    entryPoints: [
      { in: join(SRC, 'main.ts'), out: 'app' },
      { in: join(SRC, 'app.css'), out: 'app' },
    ],
    outdir: '/dashboard',
    bundle: true,
    write: false,
    format: 'esm',
    platform: 'browser',
    target: ['es2022', 'chrome110', 'firefox115', 'safari16'],
    minify: true,
    legalComments: 'none',
    charset: 'utf8',
    logLevel: 'silent',
  });
  const out = (ext: string): string => {
    const file = result.outputFiles.find((f) => f.path.endsWith(`/app.${ext}`));
    if (!file) throw new Error(`dashboard build produced no app.${ext}`);
    return file.text;
  };
  const js = out('js');
  const css = out('css');
  const hash = (text: string) => createHash('sha256').update(text).digest('hex').slice(0, 12);
  const favicon = await readFile(join(SRC, 'favicon.svg'), 'utf8');
  const html = (await readFile(join(SRC, 'index.html'), 'utf8')).replace('__JS_HASH__', hash(js)).replace('__CSS_HASH__', hash(css));
  return new Map<string, DashboardFile>([
    ['/', { body: html, type: 'text/html; charset=utf-8' }],
    ['/app.js', { body: js, type: 'text/javascript; charset=utf-8' }],
    ['/app.css', { body: css, type: 'text/css; charset=utf-8' }],
    ['/favicon.svg', { body: favicon, type: 'image/svg+xml' }],
  ]);
}
