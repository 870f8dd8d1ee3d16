/**
 * The MCP benchmark's floor for one more hop in the path: a bare reverse proxy (node:http in,
 * undici out, kept-alive) that forwards every request to the upstream and streams the answer
 * back, with no authentication, decision or audit. What the relay adds to a direct call is what
 * any gateway pays on this machine for being in the path; what Warden adds beyond it is its own.
 *
 * With a database URL as its second argument (`BENCH_MCP_RELAY_COMMITS=1`), each POST also
 * commits a row (durably, one statement each) before it is forwarded and another once the
 * whole answer is in, before it is answered: the floor of any gateway that records a call
 * before forwarding it and its outcome before answering, as Warden does — a hop and two
 * PostgreSQL round trips, nothing decided.
 *
 * Forked by mcp-gateway.ts with the upstream's URL as its argument; reports
 * { type: 'ready', url, pid } over IPC.
 */
import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { pipeline } from 'node:stream';
import pg from 'pg';
import { Agent, request } from 'undici';

const upstream = new URL(process.argv[2] ?? '');
const database = process.argv[3] ? new pg.Pool({ connectionString: process.argv[3], max: 20 }) : undefined;
await database?.query('CREATE TABLE IF NOT EXISTS bench_relay_commits (id bigserial PRIMARY KEY, stage text NOT NULL)');
const commit = async (stage: string) => {
  await database?.query('INSERT INTO bench_relay_commits (stage) VALUES ($1)', [stage]);
};
const dispatcher = new Agent({ keepAliveTimeout: 30_000, connections: 256 });
/** Hop-by-hop headers (RFC 9110 §7.6.1) and the ones the outgoing request sets itself. */
const NOT_FORWARDED = new Set(['connection', 'keep-alive', 'transfer-encoding', 'upgrade', 'host', 'content-length']);

const forwardable = (headers: IncomingHttpHeaders | Record<string, string | string[] | undefined>) => {
  const out: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(headers)) if (value !== undefined && !NOT_FORWARDED.has(name)) out[name] = value;
  return out;
};

const server = createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (chunk: Buffer) => chunks.push(chunk));
  req.on('end', () => {
    const body = chunks.length ? Buffer.concat(chunks) : undefined;
    const recorded = database !== undefined && req.method === 'POST';
    const forward = async () => {
      if (recorded) await commit('before');
      const answer = await request(new URL(req.url ?? '/', upstream), {
        method: req.method as 'GET' | 'POST' | 'DELETE',
        headers: forwardable(req.headers),
        body,
        dispatcher,
      });
      if (!recorded) return { answer };
      const whole = Buffer.from(await answer.body.arrayBuffer());
      await commit('after');
      return { answer, whole };
    };
    forward().then(
      ({ answer, whole }) => {
        res.writeHead(answer.statusCode, forwardable(answer.headers));
        if (whole) return void res.end(whole);
        // an SSE stream ends when the client goes: pipeline destroys the upstream body then
        pipeline(answer.body, res, () => undefined);
      },
      () => {
        if (!res.headersSent) res.writeHead(502);
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
  server.close();
  server.closeAllConnections();
  void Promise.allSettled([dispatcher.close(), database?.end()]).finally(() => process.exit(0));
};
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
process.on('disconnect', stop);
