/**
 * The MCP scenario's floor for one more hop: a bare reverse proxy (node:http in, undici out,
 * kept alive) that forwards every request to the upstream (argv[2]) and streams the answer
 * back, with no authentication, decision or audit. What it adds to a direct call is what any
 * gateway pays on this machine for being in the path. Reports { type: 'ready', url, pid }.
 */
import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { pipeline } from 'node:stream';
import { Agent, request } from 'undici';

const upstream = new URL(process.argv[2] ?? '');
const dispatcher = new Agent({ keepAliveTimeout: 30_000, connections: 256 });
/** Hop-by-hop headers (RFC 9110 §7.6.1) and the ones the outgoing request sets itself. */
const NOT_FORWARDED = new Set(['connection', 'keep-alive', 'transfer-encoding', 'upgrade', 'host', 'content-length']);
const forwardable = (headers: IncomingHttpHeaders) =>
  Object.fromEntries(Object.entries(headers).filter(([name, value]) => value !== undefined && !NOT_FORWARDED.has(name))) as Record<
    string,
    string
  >;

const server = createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (chunk: Buffer) => chunks.push(chunk));
  req.on('end', () => {
    const method = req.method as 'GET' | 'POST' | 'DELETE';
    request(new URL(req.url ?? '/', upstream), {
      method,
      headers: forwardable(req.headers),
      body: chunks.length ? Buffer.concat(chunks) : undefined,
      dispatcher,
    }).then(
      (answer) => {
        // the client may have gone meanwhile (a load generator ending its run)
        if (res.destroyed) return void answer.body.on('error', () => undefined).destroy();
        res.writeHead(answer.statusCode, forwardable(answer.headers as IncomingHttpHeaders));
        pipeline(answer.body, res, () => undefined);
      },
      () => {
        if (!res.headersSent && !res.destroyed) res.writeHead(502);
        res.end();
      },
    );
  });
});
server.keepAliveTimeout = 30_000;
server.listen(0, '127.0.0.1', () => {
  const { port } = server.address() as AddressInfo;
  process.send?.({ type: 'ready', url: `http://127.0.0.1:${port}${upstream.pathname}`, pid: process.pid });
});
const stop = () => {
  server.closeAllConnections();
  server.close(() => process.exit(0));
};
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
process.on('disconnect', stop);
