/**
 * Named upstream credentials of the HTTP proxy (/credentials, execution.credential): stored
 * write-only, added by Warden only to requests to their hosts (another host is refused before
 * anything is sent), named in the audit record and in the approval's act, matched by policy
 * conditions; and the setting "agents hold no credentials" with its compliance control.
 */
import type { AuditEvent } from '@warden/contract';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useTestServer } from '../support/server.ts';
import { type HeaderUpstream, startHeaderUpstream } from './support.ts';

const API_KEY = 'sk_live_brokered_0123456789abcdefKLMN';
const ROTATED = 'sk_live_rotated_9876543210fedcbaPQRS';
const server = useTestServer({ egressAllowlist: ['127.0.0.1/32', '::1/128'] });
let upstream: HeaderUpstream;

beforeAll(async () => {
  upstream = await startHeaderUpstream('X-Api-Key', API_KEY);
  expect((await server.api('POST', '/agents', { body: { name: 'Proxy Bot', slug: 'proxy-bot', provider: 'local' } })).status).toBe(201);
  const created = await server.api('POST', '/credentials', {
    body: { name: 'billing', hosts: ['127.0.0.1'], auth: { type: 'header', header: 'X-Api-Key', secret: API_KEY } },
  });
  expect(created.status).toBe(201);
});
afterAll(async () => upstream?.close());

const execute = (path: string, extra: Record<string, unknown> = {}, action = 'http.get', origin = upstream.origin) =>
  server.api('POST', '/runtime/execute', {
    unchecked: true,
    body: { input: { action, agent: 'proxy-bot' }, execution: { mode: 'http_proxy', method: 'GET', url: `${origin}${path}`, ...extra } },
  });

async function events(action: string): Promise<AuditEvent[]> {
  const res = await server.api('GET', `/audit-logs?limit=100&action=${action}`);
  expect(res.status).toBe(200);
  return res.body.data;
}

describe('/credentials', () => {
  it('answers the secret as a hint only, and by name or id', async () => {
    const got = await server.api('GET', '/credentials/billing');
    expect(got.status).toBe(200);
    expect(got.body.data).toMatchObject({
      name: 'billing',
      hosts: ['127.0.0.1'],
      auth: { type: 'header', header: 'x-api-key', hint: '…KLMN' },
    });
    const byId = await server.api('GET', `/credentials/${got.body.data.id}`);
    expect(byId.body.data.name).toBe('billing');
    const listed = await server.api('GET', '/credentials');
    expect(listed.body.data.map((c) => c.name)).toContain('billing');
    for (const answer of [got, byId, listed]) expect(JSON.stringify(answer.body)).not.toContain(API_KEY.slice(0, 16));
  });

  it('refuses a second credential of the same name: 409 conflict', async () => {
    const res = await server.api('POST', '/credentials', {
      body: { name: 'billing', hosts: ['example.com'], auth: { type: 'bearer', secret: 'another-secret-value' } },
    });
    expect(res.status).toBe(409);
    expect(res.body.error?.code).toBe('conflict');
  });

  it.each([
    ['an empty secret', { name: 'bad-a', hosts: ['example.com'], auth: { type: 'bearer', secret: '' } }],
    [
      'a malformed header name',
      { name: 'bad-b', hosts: ['example.com'], auth: { type: 'header', header: 'X:Key', secret: 'abcdefghijkl' } },
    ],
    ['no hosts', { name: 'bad-c', hosts: [], auth: { type: 'bearer', secret: 'abcdefghijkl' } }],
    ['a host with a port', { name: 'bad-d', hosts: ['example.com:443'], auth: { type: 'bearer', secret: 'abcdefghijkl' } }],
    ['a wildcard host', { name: 'bad-e', hosts: ['*.example.com'], auth: { type: 'bearer', secret: 'abcdefghijkl' } }],
    ['a malformed name', { name: 'Bad Name', hosts: ['example.com'], auth: { type: 'bearer', secret: 'abcdefghijkl' } }],
  ])('refuses %s: 400 invalid_request, nothing stored', async (_, body) => {
    const res = await server.api('POST', '/credentials', { body, unchecked: true });
    expect(res.status).toBe(400);
    expect(res.body.error?.code).toBe('invalid_request');
    expect((await server.api('GET', `/credentials/${body.name}`)).status).not.toBe(200);
  });
});

describe('execution.credential on the HTTP proxy', () => {
  it('adds the secret for a bound host: the agent sends none, the upstream gets it, the audit names the credential', async () => {
    const before = upstream.requests().length;
    const res = await execute('/invoices', { credential: 'billing' }, 'http.invoices');
    expect(res.status).toBe(200);
    expect(res.body.data.execution).toMatchObject({ status: 200, body: { ok: true } });
    const sent = upstream.requests().slice(before);
    expect(sent).toHaveLength(1);
    expect(sent[0]?.['x-api-key']).toBe(API_KEY);
    expect(JSON.stringify(res.body)).not.toContain(API_KEY);
    const recorded = await events('http.invoices');
    expect(recorded.length).toBe(2); // the decision and the outcome
    for (const event of recorded) {
      expect((event.context as { execution: Record<string, unknown> }).execution.credential_name).toBe('billing');
      expect(JSON.stringify(event)).not.toContain(API_KEY);
    }
  });

  it('refuses a host the credential is not bound to: 403 credential_host_not_bound, nothing sent, the refusal audited', async () => {
    const before = upstream.requests().length;
    const port = new URL(upstream.origin).port;
    const res = await execute('/invoices', { credential: 'billing' }, 'http.elsewhere', `http://localhost:${port}`);
    expect(res.status).toBe(403);
    expect(res.body.error?.code).toBe('credential_host_not_bound');
    expect(res.body.error?.message).toContain("'localhost'");
    expect(upstream.requests().length).toBe(before);
    const [refusal] = await events('http.elsewhere');
    expect(refusal).toMatchObject({ result: 'blocked', context: { refusal: 'credential_host_not_bound' } });
    expect(refusal?.context).toMatchObject({ execution: { credential_name: 'billing' } });
  });

  it('answers 404 credential_not_found for an unknown name, nothing sent', async () => {
    const before = upstream.requests().length;
    const res = await execute('/invoices', { credential: 'no-such-credential' });
    expect(res.status).toBe(404);
    expect(res.body.error?.code).toBe('credential_not_found');
    expect(upstream.requests().length).toBe(before);
  });

  it('refuses headers that already carry the credential’s header: 400 invalid_execution', async () => {
    const res = await execute('/invoices', { credential: 'billing', headers: { 'X-Api-Key': 'agent-held' } });
    expect(res.status).toBe(400);
    expect(res.body.error?.code).toBe('invalid_execution');
  });

  it('lets a policy condition match on execution.credential', async () => {
    const policy = await server.api('POST', '/policies', {
      body: {
        name: 'No billing deletes',
        rules: [
          {
            match: { action: ['http.delete'] },
            condition: 'execution.credential == "billing"',
            effect: 'block',
            message: 'not with billing',
          },
        ],
      },
    });
    expect(policy.status).toBe(201);
    const before = upstream.requests().length;
    const blocked = await execute('/invoices/1', { credential: 'billing', method: 'DELETE' }, 'http.delete');
    expect(blocked.status).toBe(200);
    expect(blocked.body.data).toMatchObject({ allowed: false, decision: { policy: 'No billing deletes', result: 'blocked' } });
    const without = await execute('/invoices/1', { method: 'DELETE' }, 'http.delete');
    expect(without.body.data.allowed).toBe(true);
    expect(upstream.requests().length).toBe(before + 1); // only the call without the credential went
  });

  it('rotates without a restart: the next request carries the new secret', async () => {
    const rotated = await server.api('PATCH', '/credentials/billing', {
      body: { auth: { type: 'header', header: 'X-Api-Key', secret: ROTATED } },
    });
    expect(rotated.status).toBe(200);
    expect(rotated.body.data.auth.hint).toBe('…PQRS');
    const before = upstream.requests().length;
    await execute('/invoices', { credential: 'billing' });
    expect(upstream.requests()[before]?.['x-api-key']).toBe(ROTATED);
    // and back, for the tests after this one
    await server.api('PATCH', '/credentials/billing', { body: { auth: { type: 'header', header: 'X-Api-Key', secret: API_KEY } } });
  });

  it('a deleted credential is no longer sent: 404 credential_not_found', async () => {
    const temp = await server.api('POST', '/credentials', {
      body: { name: 'temporary', hosts: ['127.0.0.1'], auth: { type: 'bearer', secret: 'temporary-secret-123' } },
    });
    expect(temp.status).toBe(201);
    expect((await server.api('DELETE', '/credentials/temporary')).status).toBe(200);
    expect((await execute('/x', { credential: 'temporary' })).body.error?.code).toBe('credential_not_found');
  });
});

describe('the setting "agents hold no credentials"', () => {
  const control = async () => {
    const res = await server.api('GET', '/compliance/status');
    expect(res.status).toBe(200);
    return res.body.data.controls.find((c) => c.id === 'agents-hold-no-credentials');
  };

  it('is off by default: an agent’s Authorization is forwarded, and the compliance control fails', async () => {
    expect((await server.api('GET', '/settings')).body.data.agents_hold_no_credentials).toBe(false);
    const before = upstream.requests().length;
    const res = await execute('/held', { headers: { Authorization: 'Bearer agent-held-token' } });
    expect(res.status).toBe(200);
    expect(upstream.requests()[before]?.authorization).toBe('Bearer agent-held-token');
    expect(await control()).toMatchObject({ status: 'fail', score: 0 });
  });

  it('when on, refuses agent-supplied credential headers (403 agent_credentials_refused, nothing sent, audited) and passes the control', async () => {
    const set = await server.api('PATCH', '/settings', { body: { agents_hold_no_credentials: true } });
    expect(set.status).toBe(200);
    expect(set.body.data.agents_hold_no_credentials).toBe(true);
    const before = upstream.requests().length;
    for (const [name, action] of [
      ['Authorization', 'http.held-auth'],
      ['Cookie', 'http.held-cookie'],
      ['X-Api-Key', 'http.held-key'],
    ] as const) {
      const res = await execute('/held', { headers: { [name]: 'agent-held-secret' } }, action);
      expect(res.status).toBe(403);
      expect(res.body.error?.code).toBe('agent_credentials_refused');
      const [refusal] = await events(action);
      expect(refusal).toMatchObject({ result: 'blocked', context: { refusal: 'agent_credentials_refused' } });
    }
    expect(upstream.requests().length).toBe(before);
    // a brokered credential still goes, and headers that carry none too
    expect((await execute('/ok', { credential: 'billing', headers: { accept: 'application/json' } })).body.data.execution.body).toEqual({
      ok: true,
    });
    expect(await control()).toMatchObject({ status: 'pass', score: 100 });
    await server.api('PATCH', '/settings', { body: { agents_hold_no_credentials: false } });
  });
});
