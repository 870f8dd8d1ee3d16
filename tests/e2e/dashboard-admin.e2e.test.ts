/**
 * The dashboard's configuration pages end to end, in a real headless Chromium (Debian's
 * `chromium`, driven by playwright-core) against a real server: API keys (issue with chosen
 * permissions, the secret shown once with a copy button, revoke after confirmation), agents
 * (suspend, reactivate), MCP servers (register, edit, delete; the egress guard's refusal and a
 * slug taken shown at the field), policies (a CEL error shown at the condition with its
 * position, the what-if replay, save, delete), what the audit log shows of a request (its
 * context, what ran, secrets redacted), the charts, and a session whose key lacks permissions.
 * Screenshots land in test-output/screenshots/admin-*.png.
 *
 * Without /usr/bin/chromium the file is skipped, except under CI=true, where it fails.
 */
import { existsSync, mkdirSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type Browser, type BrowserContext, chromium, type Page } from 'playwright-core';
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
const WAIT_MS = 15_000;

if (!HAS_CHROMIUM && process.env.CI === 'true') {
  describe('dashboard configuration pages (e2e)', () => {
    it('needs Chromium', () => {
      throw new Error(`${CHROMIUM} is missing: install Debian's chromium package (apt-get install -y chromium).`);
    });
  });
}

async function waitFor<T>(what: string, check: () => T | undefined | Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + WAIT_MS;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${WAIT_MS} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

describe.skipIf(!HAS_CHROMIUM)('dashboard configuration pages (e2e)', () => {
  const server = useTestServer({ egressAllowlist: ['127.0.0.1/32'] });
  let upstream: Server;
  let upstreamUrl = '';
  let browser: Browser;
  let context: BrowserContext;
  let page: Page;
  let dashboardUrl = '';
  /** Page errors, CSP violations, console errors and error answers other than the ones a step expects. */
  const problems: string[] = [];
  /** `METHOD path status` answers a step provokes on purpose (a refused save). */
  const expected = new Set<string>();

  const shot = (name: string) => page.screenshot({ path: join(SCREENSHOTS, `admin-${name}.png`), fullPage: true });
  const byTestId = (id: string) => page.getByTestId(id);
  const open = async (nav: string) => {
    await byTestId(`nav-${nav}`).click();
    await page.locator(`[data-testid="page-${nav}"]`).waitFor();
  };
  /** Leaves the page and comes back, so that it loads anew. */
  const reopen = async (nav: string) => {
    await open(nav === 'billing' ? 'settings' : 'billing');
    await open(nav);
  };

  beforeAll(async () => {
    mkdirSync(SCREENSHOTS, { recursive: true });
    upstream = createServer((req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ ok: true, path: req.url }));
    });
    await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
    upstreamUrl = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;
    dashboardUrl = server.url.replace('/api/v1', '/dashboard/');
    const origin = new URL(server.url).origin;
    browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS, headless: true });
    context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin });
    page = await context.newPage();
    page.setDefaultTimeout(10_000);
    page.on('pageerror', (error) => problems.push(`page error: ${error.message}`));
    page.on('console', (message) => {
      if (message.type() === 'error' && !/^Failed to load resource/.test(message.text())) problems.push(`console: ${message.text()}`);
    });
    page.on('response', (response) => {
      const url = new URL(response.url());
      if (response.status() === 401 && url.pathname === '/dashboard/api/session') return;
      const seen = `${response.request().method()} ${url.pathname} ${response.status()}`;
      if (response.status() >= 400 && !expected.has(seen)) problems.push(`HTTP ${seen}`);
    });

    await page.goto(dashboardUrl);
    await byTestId('login-key').fill(server.key);
    await byTestId('login-submit').click();
    await page.locator('[data-testid="page-webhooks"]').waitFor();
  }, 90_000);

  afterAll(async () => {
    await browser?.close().catch(() => undefined);
    await new Promise<void>((resolve) => (upstream ? upstream.close(() => resolve()) : resolve()));
  });

  it('issues an API key with chosen permissions, shows it once with a copy button, and revokes it after confirmation', async () => {
    await open('keys');
    const own = byTestId('key-row').filter({ has: byTestId('key-own') });
    await own.waitFor();
    expect(await own.getByTestId('key-revoke').count()).toBe(0);

    await byTestId('key-new').click();
    await byTestId('key-create').click();
    expect(await byTestId('key-name-error').textContent()).toMatch(/name/);
    await byTestId('key-name-input').fill('E2E reporting bot');
    await byTestId('key-create').click();
    expect(await byTestId('key-permissions-error').textContent()).toMatch(/at least one permission/);
    await byTestId('key-perm-agents:read').check();
    await byTestId('key-perm-runtime:evaluate').check();
    await byTestId('key-create').click();

    await byTestId('secret-panel').waitFor();
    const secret = await byTestId('secret-value').inputValue();
    expect(secret).toMatch(/^wk_[A-Za-z0-9_-]{43}$/);
    await byTestId('secret-copy').click();
    await expect.poll(() => byTestId('secret-copied').textContent()).toMatch(/Copied|Selected/);
    if ((await byTestId('secret-copied').textContent())?.startsWith('Copied')) {
      expect(await page.evaluate(() => navigator.clipboard.readText())).toBe(secret);
    }
    await shot('key-issued');

    // The key works with exactly these permissions.
    expect((await server.api('GET', '/agents', { key: secret })).status).toBe(200);
    expect((await server.api('GET', '/policies', { key: secret })).status).toBe(403);

    const row = byTestId('key-row').filter({ hasText: 'E2E reporting bot' });
    await row.waitFor();
    expect(await row.getByTestId('key-prefix').textContent()).toBe(`${secret.slice(0, 7)}…`);
    expect(await row.getByTestId('key-permissions').textContent()).toBe('runtime:evaluateagents:read');
    await byTestId('secret-done').click();
    expect(await byTestId('secret-panel').count()).toBe(0);
    expect(await page.content()).not.toContain(secret);

    await row.getByTestId('key-revoke').click();
    await row.getByTestId('key-revoke-cancel').click();
    expect(await row.getByTestId('key-status').textContent()).toBe('Active');
    await row.getByTestId('key-revoke').click();
    await row.getByTestId('key-revoke-confirm').click();
    await expect.poll(() => byTestId('keys-notice').textContent()).toMatch(/revoked/);
    await expect
      .poll(() => byTestId('key-row').filter({ hasText: 'E2E reporting bot' }).getByTestId('key-status').textContent())
      .toBe('Revoked');
    expect((await server.api('GET', '/agents', { key: secret })).status).toBe(401);
    await shot('keys');
  });

  it('suspends an agent after confirmation (its runtime calls are refused) and reactivates it', async () => {
    const created = await server.api('POST', '/agents', { body: { name: 'E2E Payer', slug: 'e2e-payer', provider: 'anthropic' } });
    expect(created.status).toBe(201);
    const evaluate = () => server.api('POST', '/policy/evaluate', { body: { input: { action: 'report.read', agent: 'e2e-payer' } } });
    await reopen('agents');
    const row = page.locator(`[data-testid="agent-row"][data-id="${created.body.data.id}"]`);
    await row.getByTestId('agent-suspend').click();
    await row.getByTestId('agent-suspend-confirm').click();
    await expect.poll(() => row.getByTestId('agent-status').textContent()).toBe('Suspended');
    expect(await byTestId('agents-notice').textContent()).toMatch(/suspended/);
    const refused = await evaluate();
    expect(refused.status).toBe(403);
    expect(refused.body.error.code).toBe('agent_inactive');
    await shot('agent-suspended');

    await row.getByTestId('agent-reactivate').click();
    await expect.poll(() => row.getByTestId('agent-status').textContent()).toBe('Active');
    expect((await evaluate()).status).toBe(200);
  });

  it('registers, edits and deletes an MCP server; the egress refusal and a slug taken show at their field', async () => {
    await open('mcp-servers');
    await byTestId('mcp-new').click();
    await byTestId('mcp-name').fill('Internal tools');
    await byTestId('mcp-url-input').fill('http://10.0.0.5/mcp');
    expected.add('POST /dashboard/api/mcp-servers 400');
    await byTestId('mcp-save').click();
    await expect.poll(() => byTestId('mcp-url-error').textContent()).toMatch(/denied.*WARDEN_EGRESS_ALLOWLIST/);
    expect(await byTestId('mcp-url-input').getAttribute('aria-invalid')).toBe('true');
    await shot('mcp-egress-refused');

    await byTestId('mcp-url-input').fill(`${upstreamUrl}/mcp`);
    await byTestId('mcp-slug-input').fill('tools');
    await byTestId('mcp-save').click();
    await expect.poll(() => byTestId('mcp-notice').textContent()).toMatch(/registered as tools/);
    const row = byTestId('mcp-row').filter({ hasText: 'Internal tools' });
    expect(await row.getByTestId('mcp-url').textContent()).toBe(`${upstreamUrl}/mcp`);

    await byTestId('mcp-new').click();
    await byTestId('mcp-name').fill('Another');
    await byTestId('mcp-slug-input').fill('tools');
    await byTestId('mcp-url-input').fill('https://mcp.example.com/mcp');
    expected.add('POST /dashboard/api/mcp-servers 409');
    await byTestId('mcp-save').click();
    await expect.poll(() => byTestId('mcp-slug-error').textContent()).toMatch(/already exists/);
    await byTestId('mcp-cancel').click();

    await row.getByTestId('mcp-edit').click();
    await byTestId('mcp-description').fill('Ticketing and search');
    await byTestId('mcp-enabled-input').uncheck();
    await byTestId('mcp-save').click();
    await expect.poll(() => row.getByTestId('mcp-enabled').textContent()).toBe('Disabled');
    const listed = (await server.api('GET', '/mcp-servers')).body.data.find((s) => s.slug === 'tools');
    expect(listed).toMatchObject({ description: 'Ticketing and search', enabled: false });

    // an upstream secret: write-only, shown afterwards as its header and last four characters
    const secret = 'e2e_upstream_token_0123456789WXYZ';
    await row.getByTestId('mcp-edit').click();
    await byTestId('mcp-auth-type').selectOption('bearer');
    await byTestId('mcp-auth-secret').fill(secret);
    await byTestId('mcp-save').click();
    await expect.poll(() => row.getByTestId('mcp-auth').textContent()).toBe('authorization: …WXYZ');
    expect((await server.api('GET', '/mcp-servers/tools')).body.data.upstream_auth).toEqual({
      type: 'bearer',
      header: 'authorization',
      hint: '…WXYZ',
    });
    await row.getByTestId('mcp-edit').click();
    expect(await byTestId('mcp-auth-secret').inputValue()).toBe('');
    expect(await page.content()).not.toContain(secret);
    await byTestId('mcp-cancel').click();
    await shot('mcp-servers');

    await row.getByTestId('mcp-delete').click();
    await row.getByTestId('mcp-delete-confirm').click();
    await expect.poll(() => byTestId('mcp-notice').textContent()).toMatch(/deleted/);
    expect((await server.api('GET', '/mcp-servers/tools')).status).toBe(404);
  });

  it('edits a policy: a CEL error shows at the condition with its position; what-if replays recent decisions; save and delete', async () => {
    // Recent decisions for the replay: two refunds, allowed (no policy yet).
    for (const amount of [5000, 20]) {
      const res = await server.api('POST', '/policy/evaluate', {
        body: { input: { action: 'payments.refund', agent: 'e2e-payer', context: { amount } } },
      });
      expect(res.body.data.result).toBe('allowed');
    }
    await open('policies');
    await byTestId('policy-new').click();
    await byTestId('policy-name').fill('E2E refunds');
    const rule = byTestId('rule-card').first();
    await rule.getByTestId('rule-effect').selectOption('require_approval');
    await rule.getByTestId('rule-id').fill('big-refunds');
    await rule.getByTestId('rule-match-action').fill('payments.refund');
    await rule.getByTestId('rule-condition').fill('context.amount >\n  1000 &&');
    expected.add('POST /dashboard/api/policies 400');
    await byTestId('policy-save').click();
    const error = rule.getByTestId('rule-condition-error');
    await expect.poll(() => error.textContent()).toMatch(/line \d+, column \d+/);
    expect(await error.getAttribute('data-position')).toMatch(/^\d+$/);
    expect(await rule.getByTestId('rule-condition-caret').textContent()).toContain('^');
    expect(await rule.getByTestId('rule-condition').getAttribute('aria-invalid')).toBe('true');
    expect(await byTestId('policy-notice').textContent()).toMatch(/invalid_policy/);
    await shot('policy-cel-error');

    await rule.getByTestId('rule-condition').fill('context.amount > 1000');
    expect(await error.textContent()).toBe('');
    await byTestId('policy-what-if').click();
    await byTestId('what-if-result').waitFor();
    expect(await byTestId('what-if-summary').getAttribute('data-changed')).toBe('1');
    const group = byTestId('what-if-group');
    expect(await group.count()).toBe(1);
    expect(await group.getAttribute('data-rule')).toBe('big-refunds');
    expect(await group.getAttribute('data-from')).toBe('allowed');
    expect(await group.getAttribute('data-to')).toBe('approval_required');
    await group.locator('summary').click();
    expect(await group.getByTestId('what-if-decision').count()).toBe(1);
    // drift (recorded against today's policies) is shown apart, named as such
    const drift = byTestId('what-if-drift');
    expect(await drift.locator('summary').textContent()).toMatch(
      /^Drift: \d+ recorded decisions are already decided otherwise by today's policies/,
    );
    expect(Number(await drift.getAttribute('data-changed'))).toBe(
      await byTestId('what-if-drift-group-count').evaluateAll((els) => els.reduce((n, el) => n + Number(el.textContent), 0)),
    );
    await shot('policy-what-if');

    await byTestId('policy-save').click();
    await expect.poll(() => byTestId('policy-version').textContent()).toBe('version 1');
    const id = new URL(page.url()).hash.split('/')[2] ?? '';
    expect((await server.api('GET', `/policies/${id}`)).body.data).toMatchObject({ name: 'E2E refunds', rules: [{ id: 'big-refunds' }] });
    const asked = await server.api('POST', '/policy/evaluate', {
      body: { input: { action: 'payments.refund', agent: 'e2e-payer', context: { amount: 5000, api_token: 'tok-secret-1' } } },
    });
    expect(asked.body.data.result).toBe('approval_required');

    await byTestId('rule-add').click();
    await byTestId('rule-card').nth(1).getByTestId('rule-match-action').fill('db.drop*');
    await byTestId('policy-save').click();
    await expect.poll(() => byTestId('policy-version').textContent()).toBe('version 2');
    await shot('policy-editor');

    await open('policies');
    const row = page.locator(`[data-testid="policy-row"][data-id="${id}"]`);
    expect(await row.getByTestId('policy-rules').textContent()).toBe('Require approvalBlock');
    await shot('policies');
    await row.getByTestId('policy-link').click();
    await byTestId('policy-delete').click();
    await byTestId('policy-delete-confirm').click();
    await page.locator('[data-testid="page-policies"] [data-testid="policies-table-empty"]').waitFor();
    expect((await server.api('GET', `/policies/${id}`)).status).toBe(404);
  });

  it('shows in an audit row the request’s context and what ran, secrets redacted', async () => {
    const run = await server.api('POST', '/runtime/execute', {
      body: {
        input: { action: 'e2e.fetch', agent: 'e2e-payer', context: { amount: 1200, password: 'hunter2' } },
        execution: { mode: 'http_proxy', method: 'GET', url: `${upstreamUrl}/v1/orders?api_key=k-123&page=2` },
      },
    });
    expect(run.status).toBe(200);
    await open('audit');
    await byTestId('audit-filter-action').fill('e2e.fetch');
    await byTestId('audit-apply').click();
    // one row: the act's decision, which carries the declared context, with its outcome folded in
    await expect.poll(() => byTestId('audit-row').count()).toBe(1);
    expect(await byTestId('audit-act-outcome').textContent()).toBe('Succeeded');
    const details = byTestId('audit-details').filter({ has: page.locator('summary', { hasText: 'amount 1200' }) });
    await details.locator('summary').click();
    expect(await details.getByTestId('audit-outcome').textContent()).toBe('"succeeded"');
    const context = (await details.getByTestId('audit-context').textContent()) ?? '';
    expect(context).toContain('"amount": 1200');
    expect(context).not.toContain('hunter2');
    expect(context).toContain('[redacted]');
    const ran = (await details.getByTestId('audit-execution').textContent()) ?? '';
    expect(ran).toContain(`GET ${upstreamUrl}/v1/orders?api_key=%5Bredacted%5D&page=2`);
    expect(await page.content()).not.toContain('k-123');
    await shot('audit-details');
  });

  it('draws the charts: decisions over time, top blocked actions and agents, approvals waiting', async () => {
    for (let i = 0; i < 3; i++) {
      expect((await server.api('POST', '/audit', { body: { action: 'db.drop', agent: 'e2e-cleaner', result: 'blocked' } })).status).toBe(
        201,
      );
    }
    await server.api('POST', '/audit', { body: { action: 'files.delete', agent: 'e2e-cleaner', result: 'blocked' } });
    await open('overview');
    await byTestId('chart-decisions').waitFor();
    expect(Number(await byTestId('total-blocked').textContent())).toBeGreaterThanOrEqual(4);
    expect(Number(await byTestId('total-allowed').textContent())).toBeGreaterThanOrEqual(2);
    expect(await byTestId('chart-decisions').locator('rect').count()).toBeGreaterThan(0);
    const actions = (await byTestId('chart-blocked-actions-table').textContent()) ?? '';
    expect(actions).toContain('db.drop3');
    expect(actions).toContain('files.delete1');
    expect(await byTestId('chart-blocked-agents-table').textContent()).toContain('e2e-cleaner4');
    expect(Number(await byTestId('waiting-count').textContent())).toBeGreaterThanOrEqual(1);
    await shot('overview');
    await byTestId('overview-days').selectOption('1');
    await expect.poll(() => byTestId('chart-decisions').locator('title').first().textContent()).toMatch(/per hour/);
  });

  it('a session whose key lacks permissions sees the server’s refusal, and cannot grant what it lacks', async () => {
    const adminOnly = await keyFor(server, 'admin,agents:read');
    const other = await browser.newContext();
    try {
      const p = await other.newPage();
      p.on('pageerror', (error) => problems.push(`page error: ${error.message}`));
      await p.goto(dashboardUrl);
      await p.getByTestId('login-key').fill(adminOnly);
      await p.getByTestId('login-submit').click();
      await p.getByTestId('nav-policies').click();
      await expect.poll(() => p.getByTestId('policies-notice').textContent()).toMatch(/insufficient_permission/);
      await p.getByTestId('nav-keys').click();
      await p.getByTestId('key-new').click();
      expect(await p.getByTestId('key-perm-approvals:decide').isDisabled()).toBe(true);
      expect(await p.getByTestId('key-perm-agents:read').isDisabled()).toBe(false);
      await p.getByTestId('nav-agents').click();
      await p.locator('[data-testid="agent-row"]').first().waitFor();
      expect(await p.getByTestId('agent-suspend').count()).toBe(0);
      await p.screenshot({ path: join(SCREENSHOTS, 'admin-limited-session.png'), fullPage: true });
    } finally {
      await other.close();
    }
  });

  it('ran without page errors, Content-Security-Policy violations or unexpected error answers', async () => {
    await waitFor('no pending work', () => true);
    expect(problems).toEqual([]);
  });
});
