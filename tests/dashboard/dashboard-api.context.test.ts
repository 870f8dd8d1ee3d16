/**
 * What the dashboard API shows of a request's context (GET /approvals, GET /audit-logs): the
 * declared context, e.g. the amount to approve, with values under secret-looking names redacted;
 * v1 keeps answering the context as recorded. Shared helpers: ./support/dashboard.ts.
 */
import { describe, expect, it } from 'vitest';
import { useTestServer } from '../support/server.ts';
import { dashboardHelpers } from './support/dashboard.ts';

const server = useTestServer();
const { login, freshWorkspace } = dashboardHelpers(server);

const CONTEXT = { amount_eur: 1200, currency: 'EUR', api_token: 'tok-123', nested: { password: 'hunter2', iban: 'DE89 3704' } };

describe('request context in the dashboard', () => {
  it('shows an approval’s context with its amount, secrets redacted', async () => {
    const ws = await freshWorkspace('*');
    const created = await server.api('POST', '/approvals', { key: ws.key, body: { title: 'Pay the supplier', context: CONTEXT } });
    expect(created.status).toBe(201);
    const session = await login(ws.key);
    const listed = (await session.api('GET', '/approvals')).body.data.find((a) => a.id === created.body.data.id);
    expect(listed?.context).toEqual({
      amount_eur: 1200,
      currency: 'EUR',
      api_token: '[redacted]',
      nested: { password: '[redacted]', iban: 'DE89 3704' },
    });
    expect(JSON.stringify((await session.api('GET', '/approvals')).body)).not.toMatch(/tok-123|hunter2/);
  });

  it('shows an audit event’s declared context, secrets redacted', async () => {
    const ws = await freshWorkspace('*');
    expect((await server.api('POST', '/agents', { key: ws.key, body: { name: 'Payer', slug: 'payer', provider: 'local' } })).status).toBe(
      201,
    );
    const decided = await server.api('POST', '/policy/evaluate', {
      key: ws.key,
      body: { input: { action: 'payments.send', agent: 'payer', context: CONTEXT } },
    });
    expect(decided.status).toBe(200);
    const session = await login(ws.key);
    const page = await session.api('GET', '/audit-logs', { query: { action: 'payments.send' } });
    expect(page.body.data).toHaveLength(1);
    expect(page.body.data[0]?.context.input).toEqual({
      amount_eur: 1200,
      currency: 'EUR',
      api_token: '[redacted]',
      nested: { password: '[redacted]', iban: 'DE89 3704' },
    });
    expect(JSON.stringify(page.body)).not.toMatch(/tok-123|hunter2/);
  });
});
