/**
 * Serves the human-readable API reference at /docs: Redoc's standalone bundle (from the
 * pinned `redoc` package in node_modules, never a CDN) rendering the bundled spec from
 * /api/v1/openapi.json. Works offline; the Content-Security-Policy lets the page load
 * nothing from another origin.
 *
 * Redoc rather than Scalar: both render OpenAPI 3.1, and Redoc's bundle and install are a
 * fraction of Scalar's (docs/decisions/0009-api-reference-redoc.md).
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { type Request, type Response, Router } from 'express';
import { StaticAsset } from './static-asset.ts';

export interface DocsOptions {
  /** Where the page is served. Default `/docs`. */
  path?: string;
  /** The spec the page renders. Default `/api/v1/openapi.json`. */
  specUrl?: string;
  title?: string;
}

const BUNDLE_FILE = createRequire(import.meta.url).resolve('redoc/bundles/redoc.standalone.js');
const BUNDLE_NAME = 'redoc.standalone.js';

// Redoc injects its styles at run time (styled-components) and runs its search index in a
// worker created from a blob: URL; everything else comes from this origin.
const CSP = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self' 'unsafe-inline'",
  "img-src 'self' data:",
  "font-src 'self' data:",
  "worker-src 'self' blob:",
  "connect-src 'self'",
  "frame-ancestors 'none'",
  "base-uri 'none'",
  "form-action 'none'",
].join('; ');

const escapeHtml = (text: string) =>
  text.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c] ?? c);

function page(title: string, specUrl: string, bundleUrl: string): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(title)}</title>
<style>body { margin: 0; padding: 0; }</style>
</head>
<body>
<redoc spec-url="${escapeHtml(specUrl)}" hide-hostname="false" path-in-middle-panel="true" required-props-first="true"></redoc>
<noscript>The API reference needs JavaScript. The raw spec is at <a href="${escapeHtml(specUrl)}">${escapeHtml(specUrl)}</a>.</noscript>
<script src="${escapeHtml(bundleUrl)}"></script>
</body>
</html>
`;
}

/** The /docs router: `app.use(docsRouter())`, before the API's not-found handler. */
export function docsRouter({ path = '/docs', specUrl = '/api/v1/openapi.json', title = 'Warden API reference' }: DocsOptions = {}): Router {
  const router = Router();
  const html = page(title, specUrl, `${path}/${BUNDLE_NAME}`);
  const common = (res: Response) => {
    res.setHeader('X-Content-Type-Options', 'nosniff');
    res.setHeader('Referrer-Policy', 'no-referrer');
  };

  router.get([path, `${path}/`], (_req: Request, res: Response) => {
    common(res);
    res.setHeader('Content-Security-Policy', CSP);
    res.setHeader('Cache-Control', 'no-cache');
    res.type('html').send(html);
  });
  let bundle: StaticAsset | undefined;
  router.get(`${path}/${BUNDLE_NAME}`, (req: Request, res: Response, next) => {
    common(res);
    // The bundle changes only with the pinned redoc version; an hour of caching is harmless.
    res.setHeader('Cache-Control', 'public, max-age=3600');
    bundle ??= new StaticAsset(readFileSync(BUNDLE_FILE), 'text/javascript; charset=utf-8');
    bundle.send(req, res).catch(next);
  });
  return router;
}
