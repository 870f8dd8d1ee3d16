/**
 * The baselines, each a child process of its own (argv[2] = b0 | b1, argv[3] = B1's database):
 *   B0  node:http reading the body and answering fixed JSON: the machine's HTTP ceiling;
 *   B1  node:http parsing the JSON body and answering after one INSERT of an audit-like row
 *       committed (`pg`, pool of 10, autocommit): the floor for "decide and durably record".
 * Reports { type: 'ready', port, pid } over IPC.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import pg from 'pg';

const FIXED = JSON.stringify({
  data: {
    allowed: true,
    action: 'allow',
    matched: true,
    policy: 'bench-policy-049',
    severity: 'info',
    message: 'Reading docs is fine',
    result: 'allowed',
    approval_id: null,
    audit_event_id: '00000000-0000-4000-8000-000000000000',
  },
});
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

const pool =
  process.argv[2] === 'b1' ? new pg.Pool({ connectionString: process.argv[3], max: 10, application_name: 'bench-b1' }) : undefined;
pool?.on('error', () => {});
// shaped like audit_events: uuid id, timestamptz, text columns, jsonb context
await pool?.query(`CREATE TABLE IF NOT EXISTS bench_audit_events (id uuid NOT NULL, event_timestamp timestamptz NOT NULL, source text NOT NULL, agent text,
  action text NOT NULL, resource text, tool text, environment text, result text NOT NULL, severity text NOT NULL, message text, request_id text,
  context jsonb NOT NULL DEFAULT '{}', PRIMARY KEY (event_timestamp, id))`);

const send = (res: ServerResponse, status: number, body: string) =>
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(body) }).end(body);

const server = createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (chunk: Buffer) => chunks.push(chunk));
  req.on('end', async () => {
    if (!pool) return send(res, 200, FIXED);
    try {
      const input = (JSON.parse(Buffer.concat(chunks).toString('utf8')) as { input?: Record<string, unknown> }).input ?? {};
      if (typeof input.action !== 'string') return send(res, 400, '{"error":{"code":"invalid_request"}}');
      const id = randomUUID();
      // like Warden: the caller's X-Request-Id when it is a UUID
      const requestId = UUID.test(String(req.headers['x-request-id'])) ? String(req.headers['x-request-id']).toLowerCase() : randomUUID();
      await pool.query(
        `INSERT INTO bench_audit_events (id, event_timestamp, source, agent, action, resource, tool, environment, result, severity, message, request_id, context)
         VALUES ($1, $2, 'evaluation', $3, $4, $5, $6, $7, 'allowed', 'info', 'Reading docs is fine', $8, $9)`,
        [
          id,
          new Date(),
          input.agent ?? null,
          input.action,
          input.resource ?? null,
          input.tool ?? null,
          input.environment ?? null,
          requestId,
          JSON.stringify({ input: input.context ?? {} }),
        ],
      );
      send(res, 200, FIXED.replace('00000000-0000-4000-8000-000000000000', id));
    } catch (error) {
      send(res, 503, JSON.stringify({ error: { code: 'audit_persist_failed', message: String(error) } }));
    }
  });
});
server.keepAliveTimeout = 60_000;
server.listen(0, '127.0.0.1', () => process.send?.({ type: 'ready', port: (server.address() as AddressInfo).port, pid: process.pid }));

const stop = () => {
  server.closeAllConnections();
  server.close();
  void (pool?.end() ?? Promise.resolve()).finally(() => process.exit(0));
};
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
process.on('disconnect', stop);
