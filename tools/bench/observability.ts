/**
 * What metrics and tracing cost (issue 26): Warden's POST /policy/evaluate with both on —
 * Prometheus metrics scraped every second, requests traced by Warden's default sampler (1 in 10;
 * BENCH_OTEL_TRACES_SAMPLER=always_on: every request) and exported over OTLP/HTTP to a
 * sink on 127.0.0.1 — against the same server with both off, each beside B1 in the same rounds
 * (ab-wardens.ts). Target: S/B1 with both on ≥ 0.9 × S/B1 with both off (medians over the rounds).
 */

import { mkdirSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { type AbFigures, compareWardens, formatAb } from './ab-wardens.ts';
import type { BenchConfig } from './config.ts';
import { freePort, ROOT } from './procs.ts';

const OUT_DIR = join(ROOT, 'test-output/bench');
const SCRAPE_EVERY_MS = 1000;

export interface ObservabilityFigures extends AbFigures {
  /** What the on Warden sent and served: OTLP export requests and bytes, metric scrapes. */
  exported: { otlpRequests: number; otlpBytes: number; scrapes: number; scrapeBytes: number };
  /** What the on Warden had on: `both` unless BENCH_OBSERVABILITY said `metrics` or `tracing`; and the OTEL_* variables given to it. */
  on: { which: string; otel: Record<string, string> };
}

/** An OTLP/HTTP receiver that counts what it is sent and keeps nothing. */
async function startOtlpSink() {
  const counts = { requests: 0, bytes: 0 };
  const server = createServer((req, res) => {
    req.on('data', (chunk: Buffer) => {
      counts.bytes += chunk.length;
    });
    req.on('end', () => {
      counts.requests += 1;
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    counts,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

export async function observabilityBenchmark(
  config: BenchConfig,
  register: (cleanup: () => Promise<void>) => void,
  log: (message: string) => void,
): Promise<ObservabilityFigures> {
  mkdirSync(OUT_DIR, { recursive: true });
  const sink = await startOtlpSink();
  register(sink.close);
  const metricsPort = await freePort();
  // BENCH_OBSERVABILITY=metrics|tracing turns on one of the two only, to tell their costs apart.
  const which = process.env.BENCH_OBSERVABILITY || 'both';
  if (!['both', 'metrics', 'tracing'].includes(which))
    throw new Error(`BENCH_OBSERVABILITY must be both, metrics or tracing, got '${which}'`);
  // BENCH_OTEL_<NAME> reaches that Warden as OTEL_<NAME> (a sampler, the OTLP protocol…).
  const passedOn = Object.fromEntries(
    Object.entries(process.env)
      .filter(([name, value]) => name.startsWith('BENCH_OTEL_') && value)
      .map(([name, value]) => [name.slice('BENCH_'.length), value as string]),
  );
  const onEnv = {
    ...(which !== 'tracing' && { WARDEN_METRICS_PORT: String(metricsPort) }),
    ...(which !== 'metrics' && {
      OTEL_EXPORTER_OTLP_ENDPOINT: sink.url,
      OTEL_SERVICE_NAME: 'warden-bench',
      ...passedOn,
    }),
  };

  // A Prometheus that scrapes the on Warden every second for the whole phase.
  const scrapes = { count: 0, bytes: 0 };
  const scraper = setInterval(() => {
    fetch(`http://127.0.0.1:${metricsPort}/metrics`)
      .then(async (res) => {
        const text = await res.text();
        if (res.ok) {
          scrapes.count += 1;
          scrapes.bytes += text.length;
        }
      })
      .catch(() => undefined);
  }, SCRAPE_EVERY_MS);
  register(async () => clearInterval(scraper));

  const figures = await compareWardens(config, { label: 'obs', onEnv, setting: 'metrics and tracing' }, register, log);
  clearInterval(scraper);
  return {
    ...figures,
    exported: { otlpRequests: sink.counts.requests, otlpBytes: sink.counts.bytes, scrapes: scrapes.count, scrapeBytes: scrapes.bytes },
    on: { which, otel: passedOn },
  };
}

export function formatObservability(f: ObservabilityFigures): string[] {
  return [
    'Metrics and tracing (closed loop, POST /policy/evaluate; rounds of B1, S off, S on in rotating order):',
    `  on: ${f.on.which === 'both' ? 'metrics and tracing' : `${f.on.which} only`}; ${
      Object.entries(f.on.otel)
        .map(([k, v]) => `${k}=${v}`)
        .join(' ') || "Warden's default sampler (parent-based, 1 in 10 of the traces started here)"
    }`,
    ...formatAb(f, 'both', 'target ≥ 0.9'),
    `  exported: ${f.exported.otlpRequests} OTLP requests (${(f.exported.otlpBytes / 1e6).toFixed(1)} MB), ${f.exported.scrapes} scrapes (${(f.exported.scrapeBytes / 1e3).toFixed(0)} KB)`,
  ];
}
