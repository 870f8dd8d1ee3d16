/**
 * The baselines, each a child process of its own (argv[2] = b0 | b1, argv[3] = database URL for b1):
 *   B0  raw node:http, reads the body, answers fixed JSON: the HTTP ceiling of the machine;
 *   B1  raw node:http, parses the JSON body, inserts one audit-like row with `pg` (pool of 10)
 *       and answers only after the INSERT committed (autocommit): the floor for "decide and
 *       durably record".
 * Reports { type: 'ready', port } over IPC; ends on SIGTERM/SIGINT.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import pg from 'pg';

const mode = process.argv[2];
if (mode !== 'b0' && mode !== 'b1') throw new Error(`baseline-server: mode must be b0 or b1, got '${mode}'`);

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
    execution_proxy_required: false,
    audit_event_id: '00000000-0000-4000-8000-000000000000',
  },
});

export const B1_TABLE = 'bench_audit_events';

// Shaped like audit_events: uuid id, timestamptz, text columns, jsonb context.
const CREATE_TABLE = `CREATE TABLE IF NOT EXISTS ${B1_TABLE} (
  id uuid NOT NULL,
  event_timestamp timestamptz NOT NULL,
  source text NOT NULL,
  agent text,
  action text NOT NULL,
  resource text,
  tool text,
  environment text,
  result text NOT NULL,
  severity text NOT NULL,
  message text,
  request_id text,
  context jsonb NOT NULL DEFAULT '{}',
  PRIMARY KEY (event_timestamp, id)
)`;

const INSERT = `INSERT INTO ${B1_TABLE} (id, event_timestamp, source, agent, action, resource, tool, environment, result, severity, message, request_id, context)
VALUES ($1, $2, 'evaluation', $3, $4, $5, $6, $7, 'allowed', 'info', $8, $9, $10)`;

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** Like Warden: the caller's X-Request-Id when it is a UUID, else a new one. */
function requestId(req: IncomingMessage): string {
  const incoming = req.headers['x-request-id'];
  return typeof incoming === 'string' && UUID.test(incoming) ? incoming.toLowerCase() : randomUUID();
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

function send(res: ServerResponse, status: number, body: string): void {
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

const pool = mode === 'b1' ? new pg.Pool({ connectionString: process.argv[3], max: 10, application_name: 'bench-b1' }) : undefined;
pool?.on('error', () => {});
if (pool) await pool.query(CREATE_TABLE);

const server = createServer(async (req, res) => {
  try {
    const text = await readBody(req);
    if (!pool) return send(res, 200, FIXED);
    const body = JSON.parse(text) as { input?: Record<string, unknown> };
    const input = body.input ?? {};
    if (typeof input.action !== 'string') return send(res, 400, '{"error":{"code":"invalid_request"}}');
    const id = randomUUID();
    await pool.query(INSERT, [
      id,
      new Date(),
      input.agent ?? null,
      input.action,
      input.resource ?? null,
      input.tool ?? null,
      input.environment ?? null,
      'Reading docs is fine',
      requestId(req),
      JSON.stringify({ input: input.context ?? {} }),
    ]);
    send(res, 200, FIXED.replace('00000000-0000-4000-8000-000000000000', id));
  } catch (error) {
    send(res, 503, JSON.stringify({ error: { code: 'audit_persist_failed', message: String(error) } }));
  }
});
server.keepAliveTimeout = 60_000;
await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
process.send?.({ type: 'ready', port: (server.address() as AddressInfo).port, pid: process.pid });

const stop = () => {
  server.closeAllConnections();
  server.close();
  void (pool ? pool.end() : Promise.resolve()).finally(() => process.exit(0));
};
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
process.on('disconnect', stop);
