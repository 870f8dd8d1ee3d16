/**
 * What the webhook delivery test files share (delivery.*.test.ts): receivers (node:http servers on
 * 127.0.0.1 that record what they get and answer as told), Standard Webhooks verification, polling,
 * and workspaces with an endpoint, bound to the file's server.
 */
import { createServer, type IncomingHttpHeaders, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { dashboard } from '@warden/contract';
import { Webhook } from 'standardwebhooks';
import { afterAll, expect } from 'vitest';
import type { TypedApi, V1Route } from '../../support/api.ts';
import { type DashboardSession, dashboardLogin, type TestServer, withKey } from '../../support/server.ts';

type WebhookDelivery = dashboard.WebhookDelivery;

export const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
export const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
/** The harness's schedule ('0,100ms,200ms'): three attempts in all. */
export const SCHEDULE_LENGTH = 3;

// ---------------------------------------------------------------------------------------
// Receivers

export interface Received {
  headers: IncomingHttpHeaders;
  body: string;
  payload: any;
  at: number;
}

export interface Answer {
  status: number;
  headers?: Record<string, string>;
  body?: string;
}

export interface Receiver {
  url: string;
  received: Received[];
  /** Decides the answer to the n-th request (1-based); 'hang' never answers. */
  answer: (n: number) => Answer | 'hang' | Promise<Answer>;
  close(): Promise<void>;
}

/** Receivers started by this file: closed after its tests (see `closeReceiversAfterAll`). */
const receivers: Receiver[] = [];

/** Closes the file's receivers after its tests: before its server's own close (which waits for deliveries under way). */
export function closeReceiversAfterAll() {
  afterAll(async () => {
    await Promise.all(receivers.map((r) => r.close()));
  });
}

export async function startReceiver(answer: Receiver['answer'] = () => ({ status: 200, body: 'ok' })): Promise<Receiver> {
  const received: Received[] = [];
  const receiver: Receiver = { url: '', received, answer, close: async () => undefined };
  const http = createServer((req, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', async () => {
      const body = Buffer.concat(chunks).toString('utf8');
      let payload: unknown;
      try {
        payload = JSON.parse(body);
      } catch {
        payload = undefined;
      }
      received.push({ headers: req.headers, body, payload, at: Date.now() });
      const decided = await receiver.answer(received.length);
      if (decided === 'hang') return; // closed by close()
      const { status, headers, body: answerBody } = decided;
      res.writeHead(status, { 'content-type': 'text/plain', ...headers }).end(answerBody ?? '');
    });
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  receiver.url = `http://127.0.0.1:${(http.address() as AddressInfo).port}/hook`;
  receiver.close = () =>
    new Promise<void>((resolve) => {
      http.close(() => resolve());
      http.closeAllConnections();
    });
  receivers.push(receiver);
  return receiver;
}

export const webhookHeaders = (r: Received) => ({
  'webhook-id': String(r.headers['webhook-id']),
  'webhook-timestamp': String(r.headers['webhook-timestamp']),
  'webhook-signature': String(r.headers['webhook-signature']),
});

/** Verifies a delivery with the Standard Webhooks library; returns the verified payload. */
export function verify(r: Received, secret: string): any {
  return new Webhook(secret).verify(r.body, webhookHeaders(r));
}

export { sleep, until } from '../../support/until.ts';

/** Enough worker rounds (pollMs 50) for anything due to have been sent. */
export const QUIET_MS = 600;

// ---------------------------------------------------------------------------------------
// Workspaces, endpoints and the dashboard API

export interface Workspace {
  slug: string;
  id: string;
  key: string;
  dash: DashboardSession;
  /** The API with the workspace's key. */
  api: TypedApi<V1Route>;
}

/** The helpers bound to the file's server (a `useTestServer()` handle). */
export function deliveryHelpers(server: TestServer) {
  let workspaceCount = 0;
  async function freshWorkspace(): Promise<Workspace> {
    const slug = `hooks-${++workspaceCount}`;
    const created = await server.admin('workspaces.create', { slug });
    const { key } = await server.admin('keys.create', { workspace: slug, permissions: '*' });
    return { slug, id: created.id, key, dash: await dashboardLogin(server.origin, key), api: withKey(server, key) };
  }

  async function addEndpoint(ws: Workspace, receiver: Receiver, events = '*'): Promise<{ id: string; secret: string }> {
    const created = await server.admin('webhooks.create', { workspace: ws.slug, url: receiver.url, events });
    expect(created.id).toMatch(UUID);
    expect(created.secret).toMatch(/^whsec_/);
    return { id: created.id, secret: created.secret };
  }

  return { freshWorkspace, addEndpoint };
}

/** The deliveries of an endpoint, newest first (GET /dashboard/api/webhooks/{id}/deliveries). */
export async function deliveries(ws: Workspace, endpointId: string): Promise<WebhookDelivery[]> {
  const res = await ws.dash.api('GET', `/webhooks/${endpointId}/deliveries?limit=100`);
  expect(res.status).toBe(200);
  return res.body.data;
}

export const ofType = (receiver: Receiver, type: string) => receiver.received.filter((r) => r.payload?.type === type);

export const createAgent = async (ws: Workspace, name: string) => {
  const res = await ws.api('POST', '/agents', { body: { name, provider: 'local' } });
  expect(res.status).toBe(201);
  return res.body.data;
};
