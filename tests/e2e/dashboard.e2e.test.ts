/**
 * The dashboard end to end, in a real headless Chromium (Debian's `chromium`, driven by
 * playwright-core; no downloaded browser): log in, manage a webhook endpoint whose receiver is
 * a node:http server on 127.0.0.1 (let through the egress guard), see deliveries, decide
 * approvals, read audit, compliance and agents, see the plan. A screenshot of each page is
 * kept under test-output/screenshots/ for a person to look at.
 *
 * Without /usr/bin/chromium the file is skipped, except under CI=true, where it fails.
 */
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type Browser, type BrowserContext, chromium, type Locator, type Page } from 'playwright-core';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { keyFor, useTestServer } from '../support/server.ts';

const CHROMIUM = '/usr/bin/chromium';
const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--no-first-run',
];
const HAS_CHROMIUM = existsSync(CHROMIUM);
const SCREENSHOTS = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'test-output', 'screenshots');
/** Upper bound for anything asynchronous (deliveries, sealing); normally well under a second. */
const WAIT_MS = 15_000;

if (!HAS_CHROMIUM && process.env.CI === 'true') {
  describe('dashboard (e2e)', () => {
    it('needs Chromium', () => {
      throw new Error(
        `${CHROMIUM} is missing: install Debian's chromium package (apt-get install -y chromium). CI must run the dashboard e2e test, so it fails instead of skipping.`,
      );
    });
  });
}

interface Received {
  headers: IncomingHttpHeaders;
  body: string;
  payload: { id: string; type: string; data: unknown };
}

interface Receiver {
  url: string;
  received: Received[];
  close(): Promise<void>;
}

async function startReceiver(): Promise<Receiver> {
  const received: Received[] = [];
  const http: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      let payload: Received['payload'];
      try {
        payload = JSON.parse(body);
      } catch {
        payload = { id: '', type: '(not json)', data: body };
      }
      received.push({ headers: req.headers, body, payload });
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ received: payload.type }));
    });
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  const { port } = http.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/hooks/warden`,
    received,
    close: () => new Promise<void>((resolve) => http.close(() => resolve())),
  };
}

/** Polls `check` until it returns a value (not undefined), or fails after WAIT_MS with `what`. */
async function waitFor<T>(what: string, check: () => T | undefined | Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + WAIT_MS;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${WAIT_MS} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

describe.skipIf(!HAS_CHROMIUM)('dashboard (e2e)', () => {
  const server = useTestServer({ egressAllowlist: ['127.0.0.1/32'] });
  let receiver: Receiver;
  let browser: Browser;
  let context: BrowserContext;
  let page: Page;
  let dashboardUrl: string;
  let origin: string;
  let endpointId = '';
  let secret = '';
  /** Page errors, CSP violations and console errors other than the expected 401s. */
  const problems: string[] = [];

  const shot = (name: string) => page.screenshot({ path: join(SCREENSHOTS, `${name}.png`), fullPage: true });
  const byTestId = (id: string) => page.getByTestId(id);
  const open = async (nav: string) => {
    await byTestId(`nav-${nav}`).click();
    await page.locator(`[data-testid="page-${nav}"]`).waitFor();
  };
  const deliveryRow = (eventType: string): Locator =>
    page.getByTestId('delivery-row').filter({ has: page.getByTestId('delivery-event-type').getByText(eventType, { exact: true }) });
  /** Clicks Refresh until a delivery of `eventType` shows `status`. */
  const waitForDelivery = (eventType: string, status: string) =>
    waitFor(`a ${status} ${eventType} delivery in the history`, async () => {
      await byTestId('deliveries-refresh').click();
      const found = await deliveryRow(eventType).locator(`[data-testid="delivery-status"][data-status="${status}"]`).count();
      return found > 0 ? true : undefined;
    });

  beforeAll(async () => {
    mkdirSync(SCREENSHOTS, { recursive: true });
    receiver = await startReceiver();
    dashboardUrl = server.url.replace('/api/v1', '/dashboard/');
    origin = new URL(server.url).origin;
    browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS, headless: true });
    context = await browser.newContext({ viewport: { width: 1280, height: 860 } });
    page = await context.newPage();
    page.setDefaultTimeout(10_000);
    page.on('pageerror', (error) => problems.push(`page error: ${error.message}`));
    page.on('console', (message) => {
      const text = message.text();
      // Failed loads are reported below with their URL.
      if (message.type() === 'error' && !/^Failed to load resource/.test(text)) problems.push(`console: ${text}`);
    });
    page.on('response', (response) => {
      const url = new URL(response.url());
      // Expected: GET /session before login, and the wrong key.
      if (response.status() === 401 && url.pathname === '/dashboard/api/session') return;
      if (response.status() >= 400) problems.push(`HTTP ${response.status()} for ${response.request().method()} ${url.pathname}`);
    });
    // Starting Chromium takes a while on a loaded machine; leave room.
  }, 90_000);

  afterAll(async () => {
    await browser?.close().catch(() => undefined);
    await receiver?.close();
  });

  it('refuses a wrong key with an error in words', async () => {
    await page.goto(dashboardUrl);
    await byTestId('login-key').fill('wk_this_key_does_not_exist_0123456789');
    await byTestId('login-submit').click();
    await expect.poll(() => byTestId('login-error').textContent()).toMatch(/unknown or revoked/i);
    await shot('login');
    expect(await context.cookies()).toEqual([]);
  });

  it('logs in with an admin key; the session cookie is HttpOnly and SameSite=Strict', async () => {
    await byTestId('login-key').fill(server.key);
    await byTestId('login-submit').click();
    await byTestId('workspace-name').waitFor();
    expect(await byTestId('workspace-name').textContent()).toContain('default');
    await page.locator('[data-testid="page-webhooks"]').waitFor();

    const cookie = (await context.cookies()).find((c) => c.name === 'warden_session');
    expect(cookie, 'warden_session cookie').toBeDefined();
    expect(cookie!.httpOnly).toBe(true);
    expect(cookie!.sameSite).toBe('Strict');
    // The API key itself is never kept by the browser.
    const stored = await page.evaluate(() => JSON.stringify({ ...localStorage }) + JSON.stringify({ ...sessionStorage }) + document.cookie);
    expect(stored).not.toContain(server.key);
  });

  it('refuses a state-changing request that carries the cookie but no X-CSRF-Token (403)', async () => {
    const cookie = (await context.cookies()).find((c) => c.name === 'warden_session')!;
    const headers = { cookie: `warden_session=${cookie.value}`, 'content-type': 'application/json', origin: 'https://evil.example' };
    const body = JSON.stringify({ url: receiver.url, events: ['*'] });
    // The cookie alone is a valid session …
    const read = await fetch(`${origin}/dashboard/api/webhooks`, { headers: { cookie: headers.cookie } });
    expect(read.status).toBe(200);
    // … but without the CSRF token (or with a wrong one) nothing changes.
    const forged = await fetch(`${origin}/dashboard/api/webhooks`, { method: 'POST', headers, body });
    expect(forged.status).toBe(403);
    expect(((await forged.json()) as { error: { code: string } }).error.code).toBe('csrf_token_invalid');
    const wrong = await fetch(`${origin}/dashboard/api/webhooks`, {
      method: 'POST',
      headers: { ...headers, 'x-csrf-token': 'not-the-token' },
      body,
    });
    expect(wrong.status).toBe(403);
    expect(((await wrong.json()) as { error: { code: string } }).error.code).toBe('csrf_token_invalid');
    const logout = await fetch(`${origin}/dashboard/api/session`, { method: 'DELETE', headers: { cookie: headers.cookie } });
    expect(logout.status).toBe(403);
    const list = (await (await fetch(`${origin}/dashboard/api/webhooks`, { headers: { cookie: headers.cookie } })).json()) as {
      data: unknown[];
    };
    expect(list.data).toEqual([]);
  });

  it('creates a webhook endpoint and shows its secret once', async () => {
    await byTestId('webhook-new').click();
    await byTestId('webhook-url').fill(receiver.url);
    await byTestId('webhook-event-all').check();
    await byTestId('webhook-description').fill('E2E receiver');
    await byTestId('webhook-create').click();
    await byTestId('secret-panel').waitFor();
    secret = await byTestId('secret-value').inputValue();
    expect(secret).toMatch(/^whsec_[A-Za-z0-9+/=]{32,}$/);
    endpointId = (await byTestId('webhook-created').getAttribute('data-id')) ?? '';
    expect(endpointId).toMatch(/^[0-9a-f-]{36}$/);

    await byTestId('webhook-open-created').click();
    await byTestId('webhook-details').waitFor();
    expect(await byTestId('webhook-url-value').textContent()).toBe(receiver.url);
    expect(await byTestId('webhook-status').textContent()).toBe('Active');
    // The secret is not shown again.
    expect(await byTestId('secret-panel').count()).toBe(0);
  });

  it('delivers an agent.created event, signed, and shows it as succeeded', async () => {
    const created = await server.api('POST', '/agents', { body: { name: 'E2E Bot', provider: 'anthropic', environment: 'staging' } });
    expect(created.status).toBe(201);

    await waitForDelivery('agent.created', 'succeeded');
    const row = deliveryRow('agent.created').first();
    expect(await row.getByTestId('delivery-response-status').textContent()).toBe('HTTP 200');
    expect(await row.getByTestId('delivery-response-body').textContent()).toContain('agent.created');
    expect(await row.getByTestId('delivery-attempts').textContent()).toBe('1 attempt');

    const got = await waitFor('the receiver to get agent.created', () => receiver.received.find((r) => r.payload.type === 'agent.created'));
    expect(got.headers['webhook-id']).toBe(got.payload.id);
    expect(got.headers['webhook-timestamp']).toMatch(/^\d+$/);
    expect(got.headers['webhook-signature']).toMatch(/^v1,[A-Za-z0-9+/=]+/);
    // Verifiable with the secret the dashboard showed, by the Standard Webhooks library.
    const verified = new Webhook(secret).verify(got.body, {
      'webhook-id': String(got.headers['webhook-id']),
      'webhook-timestamp': String(got.headers['webhook-timestamp']),
      'webhook-signature': String(got.headers['webhook-signature']),
    });
    expect(verified).toMatchObject({ type: 'agent.created' });
  });

  it('sends a test event and replays a delivery with the same webhook-id', async () => {
    await byTestId('webhook-test').click();
    await expect.poll(() => byTestId('webhook-notice').textContent()).toMatch(/Test event queued/);
    await waitForDelivery('webhook.test', 'succeeded');
    await waitFor('the receiver to get webhook.test', () => receiver.received.find((r) => r.payload.type === 'webhook.test'));

    const original = receiver.received.find((r) => r.payload.type === 'agent.created')!;
    const before = receiver.received.length;
    await deliveryRow('agent.created').first().getByTestId('delivery-replay').click();
    await expect.poll(() => byTestId('deliveries-notice').textContent()).toMatch(/Replay queued/);
    const replayed = await waitFor('the replayed agent.created', () =>
      receiver.received.slice(before).find((r) => r.payload.type === 'agent.created'),
    );
    expect(replayed.headers['webhook-id']).toBe(original.headers['webhook-id']);
    await waitFor('two succeeded agent.created deliveries', async () => {
      await byTestId('deliveries-refresh').click();
      return (await deliveryRow('agent.created').locator('[data-status="succeeded"]').count()) >= 2 ? true : undefined;
    });
    await shot('webhook-detail');
  });

  it('shows the payload of a delivery, as the receiver got it', async () => {
    const got = receiver.received.find((r) => r.payload.type === 'agent.created');
    await deliveryRow('agent.created').first().getByTestId('delivery-view-payload').click();
    await byTestId('delivery-payload').waitFor();
    expect(await page.getByRole('heading', { name: 'Payload of agent.created' }).count()).toBe(1);
    expect(JSON.parse((await byTestId('delivery-payload-json').textContent()) ?? '')).toEqual(got?.payload);
    await shot('webhook-payload');
    await byTestId('delivery-payload-close').click();
    await expect.poll(() => byTestId('delivery-payload').count()).toBe(0);
  });

  it('pauses, resumes and rotates the secret of the endpoint', async () => {
    await byTestId('webhook-pause').click();
    await expect.poll(() => byTestId('webhook-status').textContent()).toBe('Paused');
    await byTestId('webhook-resume').click();
    await expect.poll(() => byTestId('webhook-status').textContent()).toBe('Active');

    await byTestId('rotate-overlap').fill('60');
    await byTestId('rotate-submit').click();
    await byTestId('secret-panel').waitFor();
    const rotated = await byTestId('secret-value').inputValue();
    expect(rotated).toMatch(/^whsec_/);
    expect(rotated).not.toBe(secret);
    expect(await byTestId('webhook-rotation').textContent()).toMatch(/previous secret also signs until/);
    secret = rotated;
  });

  it('lists the endpoint, and deletes another one after confirmation', async () => {
    await open('webhooks');
    await byTestId('webhook-new').click();
    await byTestId('webhook-url').fill(`${receiver.url}/to-delete`);
    await byTestId('webhook-event-billing.updated').check();
    await byTestId('webhook-create').click();
    await byTestId('secret-panel').waitFor();
    await byTestId('webhook-open-created').click();
    await byTestId('webhook-delete').click();
    await byTestId('webhook-delete-confirm').click();
    await page.locator('[data-testid="webhooks-table"]').waitFor();
    await expect.poll(() => byTestId('webhook-row').count()).toBe(1);
    expect(await byTestId('webhook-row').first().getAttribute('data-id')).toBe(endpointId);
    await shot('webhooks');
  });

  it('decides approvals: pending first, approve, reject needs a note', async () => {
    const ask = async (title: string) => {
      const res = await server.api('POST', '/approvals', {
        body: { title, action: 'payments.refund', resource: 'orders/4411', priority: 'high', type: 'payment' },
      });
      expect(res.status).toBe(201);
      return res.body.data.id as string;
    };
    const approveId = await ask('E2E: refund 1,200 EUR');
    const rejectId = await ask('E2E: export the customer table');
    const card = (id: string) => page.locator(`[data-testid="approval-card"][data-id="${id}"]`);

    await open('approvals');
    await card(approveId).waitFor();
    await card(approveId).getByTestId('approval-approve').click();
    await expect.poll(() => byTestId('approvals-notice').textContent()).toMatch(/approved/);
    await page.locator(`[data-testid="approval-row"][data-id="${approveId}"] [data-status="approved"]`).waitFor();
    expect(await card(approveId).count()).toBe(0);

    // Without a note: refused, in words, and nothing changes.
    await card(rejectId).getByTestId('approval-reject').click();
    await expect.poll(() => card(rejectId).getByTestId('approval-error').textContent()).toMatch(/note is required/i);
    expect((await server.api('GET', `/approvals/${rejectId}`)).body.data.status).toBe('pending');
    await shot('approvals-note-required');

    await card(rejectId).getByTestId('approval-note').fill('Contains personal data; use the anonymised view.');
    await card(rejectId).getByTestId('approval-reject').click();
    await page.locator(`[data-testid="approval-row"][data-id="${rejectId}"] [data-status="rejected"]`).waitFor();
    const rejected = (await server.api('GET', `/approvals/${rejectId}`)).body.data;
    expect(rejected).toMatchObject({ status: 'rejected', decision_note: 'Contains personal data; use the anonymised view.' });
    expect((await server.api('GET', `/approvals/${approveId}`)).body.data.status).toBe('approved');
    await waitFor('approval.completed at the receiver', () => receiver.received.find((r) => r.payload.type === 'approval.completed'));
    await shot('approvals');
  });

  it('shows the approver what will run: method, URL, body and context, secrets redacted', async () => {
    await server.api('POST', '/agents', { body: { name: 'E2E Payer', provider: 'anthropic', environment: 'production' } });
    const res = await server.api('POST', '/approvals', {
      body: {
        title: 'E2E: pay the supplier',
        input: { action: 'payments.send', agent: 'E2E Payer', context: { amount_eur: 1200 } },
        execution: {
          mode: 'http_proxy',
          method: 'POST',
          url: 'https://pay.example.com/v1/transfers?api_key=k-123',
          body: { to: 'DE89 3704', amount: 1200, password: 'hunter2' },
        },
      },
    });
    expect(res.status).toBe(201);
    const card = page.locator(`[data-testid="approval-card"][data-id="${res.body.data.id}"]`);
    await open('agents'); // the approvals page is open already: leave it, so that it loads anew
    await open('approvals');
    await card.waitFor();
    const shown = (await card.getByTestId('approval-execution').textContent()) ?? '';
    expect(shown).toContain('POST https://pay.example.com/v1/transfers?api_key=%5Bredacted%5D');
    expect(shown).toContain('"amount": 1200');
    expect(shown).not.toContain('hunter2');
    expect(await card.getByTestId('approval-context').textContent()).toContain('"amount_eur": 1200');
    await card.scrollIntoViewIfNeeded();
    await shot('approvals-what-will-run');
  });

  it('shows the server refusing a decision to a key without approvals:decide', async () => {
    const id = (await server.api('POST', '/approvals', { body: { title: 'E2E: needs approvals:decide' } })).body.data.id as string;
    const adminOnly = await keyFor(server, 'admin');
    const other = await browser.newContext();
    try {
      const p = await other.newPage();
      await p.goto(dashboardUrl);
      await p.getByTestId('login-key').fill(adminOnly);
      await p.getByTestId('login-submit').click();
      await p.getByTestId('nav-approvals').click();
      const card = p.locator(`[data-testid="approval-card"][data-id="${id}"]`);
      await card.getByTestId('approval-approve').click();
      await expect.poll(() => card.getByTestId('approval-error').textContent()).toMatch(/insufficient_permission/);
      expect((await server.api('GET', `/approvals/${id}`)).body.data.status).toBe('pending');
    } finally {
      await other.close();
    }
  });

  it('reads the audit log with filters, pagination and the chain verification', async () => {
    for (let i = 0; i < 27; i++) {
      const res = await server.api('POST', '/audit', {
        body: { action: 'e2e.page', result: i % 2 ? 'blocked' : 'approval_required', severity: i % 3 ? 'high' : 'low' },
      });
      expect(res.status).toBe(201);
    }
    await waitFor('every audit event sealed', async () => {
      const v = (await server.api('GET', '/audit/verify')).body.data;
      return v.unsealed === 0 && v.checked >= 27 ? v : undefined;
    });

    await open('audit');
    await expect.poll(() => byTestId('audit-verify-status').getAttribute('data-valid')).toBe('true');
    expect(await byTestId('audit-verify-status').textContent()).toMatch(/^Valid/);
    expect(await byTestId('audit-verify-checked').textContent()).toMatch(/^\d+ sealed events$/);
    expect(await byTestId('audit-verify-unsealed').textContent()).toBe('0 not yet sealed');

    await byTestId('audit-filter-action').fill('e2e.page');
    await byTestId('audit-apply').click();
    await expect.poll(() => byTestId('audit-row').count()).toBe(25);
    expect(await byTestId('audit-next').isEnabled()).toBe(true);
    await byTestId('audit-next').click();
    await expect.poll(() => byTestId('audit-page').textContent()).toBe('Page 2');
    await expect.poll(() => byTestId('audit-row').count()).toBe(2);
    expect(await byTestId('audit-next').isEnabled()).toBe(false);

    await byTestId('audit-filter-result').selectOption('blocked');
    await byTestId('audit-filter-severity').selectOption('high');
    await byTestId('audit-apply').click();
    await expect.poll(() => byTestId('audit-page').textContent()).toBe('Page 1');
    // i odd and not a multiple of 3: 1, 5, 7, 11, 13, 17, 19, 23, 25
    await expect.poll(() => byTestId('audit-row').count()).toBe(9);
    for (const text of await byTestId('audit-result').allTextContents()) expect(text).toBe('Blocked');

    await byTestId('audit-clear').click();
    await expect.poll(() => byTestId('audit-row').count()).toBe(25);
    await shot('audit');
  });

  it('searches the audit log, narrows it by date and downloads what it shows as CSV', async () => {
    for (const resource of ['needle/1', 'Needle/2']) {
      expect((await server.api('POST', '/audit', { body: { action: 'e2e.search', resource, result: 'blocked' } })).status).toBe(201);
    }
    await open('audit');
    await byTestId('audit-filter-search').fill('NEEDLE');
    await byTestId('audit-apply').click();
    await expect.poll(() => byTestId('audit-row').count()).toBe(2);

    const tomorrow = new Date(Date.now() + 24 * 3600 * 1000);
    const local = new Date(tomorrow.getTime() - tomorrow.getTimezoneOffset() * 60_000).toISOString().slice(0, 16);
    await byTestId('audit-filter-from').fill(local);
    await byTestId('audit-apply').click();
    await expect.poll(() => byTestId('audit-row').count()).toBe(0);
    await byTestId('audit-filter-from').fill('');
    await byTestId('audit-apply').click();
    await expect.poll(() => byTestId('audit-row').count()).toBe(2);
    await shot('audit-search');

    const [download] = await Promise.all([page.waitForEvent('download'), byTestId('audit-export-csv').click()]);
    expect(download.suggestedFilename()).toMatch(/^warden-audit-\d{4}-\d{2}-\d{2}\.csv$/);
    const csv = readFileSync((await download.path()) as string, 'utf8');
    const lines = csv.trimEnd().split('\r\n');
    expect(lines[0]).toMatch(/^id,event_timestamp,sequence,hash,source,agent,action,resource,/);
    expect(lines.slice(1).map((line) => line.split(',')[7])).toEqual(['Needle/2', 'needle/1']);
  });

  it('shows the compliance score and each control', async () => {
    await open('compliance');
    await byTestId('compliance-score').waitFor();
    for (const id of ['compliance-score', 'compliance-framework-score', 'compliance-coverage', 'compliance-risk-score']) {
      expect(await byTestId(id).textContent()).toMatch(/^\d+(\.\d)? %$/);
    }
    const api = (await server.api('GET', '/compliance/status')).body.data;
    expect(await byTestId('control-row').count()).toBe(api.controls.length);
    expect(await byTestId('compliance-score').textContent()).toBe(`${api.score.toFixed(1)} %`);
    for (const text of await byTestId('control-status').allTextContents()) expect(['Pass', 'Fail', 'Not applicable']).toContain(text);
    // no witness configured: the page says so rather than implying the log is vouched for
    const witnesses = byTestId('audit-witnesses');
    expect(await witnesses.getAttribute('data-witnessed')).toBe('false');
    expect(await witnesses.textContent()).toContain('The audit log is unwitnessed');
    await shot('compliance');
  });

  it('lists agents with status, environment, risk level and key', async () => {
    await open('agents');
    const row = byTestId('agent-row').filter({ hasText: 'E2E Bot' });
    await row.waitFor();
    expect(await row.getByTestId('agent-status').textContent()).toBe('Active');
    expect(await row.getByTestId('agent-environment').textContent()).toBe('Staging');
    expect(await row.getByTestId('agent-risk').textContent()).toBe('Not rated');
    // registered without api_key: the key Warden generated, shown by its public part
    expect(await row.getByTestId('agent-key').textContent()).toMatch(/^wak_[0-9a-f]{16}_…$/);
    await shot('agents');
  });

  it('shows the billing plan read-only: plans are set by the operator with the CLI, which fires billing.updated', async () => {
    await open('billing');
    await expect.poll(() => byTestId('billing-plan').textContent()).toBe('Free');
    expect(await byTestId('billing-plan-select').isDisabled()).toBe(true);
    expect(await byTestId('billing-operator').textContent()).toMatch(/set by the operator/);
    expect(await byTestId('billing-command').textContent()).toContain('npm run warden -- billing set-plan --workspace default');
    await server.admin('billing.set-plan', { workspace: 'default', plan: 'business' });
    await open('agents');
    await open('billing');
    await expect.poll(() => byTestId('billing-plan').textContent()).toBe('Business');
    const event = await waitFor('billing.updated at the receiver', () =>
      receiver.received.find((r) => r.payload.type === 'billing.updated'),
    );
    expect(JSON.stringify(event.payload.data)).toContain('business');
    await shot('billing');
  });

  it('logs out: the session ends on the server too', async () => {
    const cookie = (await context.cookies()).find((c) => c.name === 'warden_session')!;
    await byTestId('logout').click();
    await byTestId('login-key').waitFor();
    const after = await fetch(`${origin}/dashboard/api/session`, { headers: { cookie: `warden_session=${cookie.value}` } });
    expect(after.status).toBe(401);
  });

  it('ran without page errors or Content-Security-Policy violations', () => {
    expect(problems).toEqual([]);
  });
});
