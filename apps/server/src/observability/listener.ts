/**
 * The metrics listener: GET /metrics (Prometheus text format) on an address of its own, not on
 * the API's port, so the API's public surface does not show it (WARDEN_METRICS_PORT, bound to
 * WARDEN_METRICS_HOST, 127.0.0.1 by default).
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface MetricsSource {
  render(): Promise<string>;
  readonly contentType: string;
}

export interface MetricsListener {
  /** http://host:port/metrics */
  url: string;
  close(): Promise<void>;
}

export async function startMetricsListener(source: MetricsSource, port: number, host: string): Promise<MetricsListener> {
  const server: Server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (path !== '/metrics' || (req.method !== 'GET' && req.method !== 'HEAD')) {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n');
      return;
    }
    source.render().then(
      (text) =>
        res
          .writeHead(200, { 'content-type': source.contentType, 'cache-control': 'no-store' })
          .end(req.method === 'HEAD' ? undefined : text),
      (error: unknown) => res.writeHead(500, { 'content-type': 'text/plain' }).end(`metrics failed: ${(error as Error).message}\n`),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address() as AddressInfo;
  const shown = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  return {
    url: `http://${shown}:${address.port}/metrics`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
