/**
 * Issue 37, "an OAuth connection to the upstream's authorization server that an admin makes once
 * in the dashboard": in headless Chromium an admin registers an MCP server with an OAuth
 * connection, presses Connect, signs in and consents at the upstream's authorization server
 * (oidc-provider, tests/credentials/oauth-upstream.ts), and is brought back to the MCP servers
 * page, which says the server is connected; then connects it again for one agent, as another
 * user. That agent then calls the server's tool through the gateway with its own key only, as
 * the user who consented for it. Screenshot:
 * test-output/screenshots/mcp-oauth-connected.png.
 */
import { existsSync, mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type Browser, chromium } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type OAuthUpstream, startOAuthUpstream } from '../credentials/oauth-upstream.ts';
import { connectClient } from '../mcp-gateway/support.ts';
import { keyFor, useTestServer } from '../support/server.ts';

const CHROMIUM = '/usr/bin/chromium';
const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'];
const HAS_CHROMIUM = existsSync(CHROMIUM);
const SCREENSHOTS = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'test-output', 'screenshots');
const AGENT_KEY = 'ak_dashboard_oauth_agent_0123456789';

describe.skipIf(!HAS_CHROMIUM && process.env.CI !== 'true')('an upstream OAuth connection made in the dashboard (e2e)', () => {
  const server = useTestServer({ egressAllowlist: ['127.0.0.1/32'] });
  let upstream: OAuthUpstream;
  let browser: Browser;
  let key: string;

  beforeAll(async () => {
    mkdirSync(SCREENSHOTS, { recursive: true });
    upstream = await startOAuthUpstream(`${server.origin}/oauth/upstream/callback`);
    key = await keyFor(server, '*', 'oauth-dashboard');
    const agent = await server.api('POST', '/agents', {
      key,
      unchecked: true,
      body: { name: 'Desk', slug: 'desk', provider: 'local', api_key: AGENT_KEY },
    });
    expect(agent.status).toBe(201);
    browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS, headless: true });
  }, 120_000);

  afterAll(async () => {
    await browser?.close().catch(() => undefined);
    await upstream?.close();
  });

  it('registers, connects through the authorization server’s sign-in and consent, and shows it connected', async () => {
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    const page = await context.newPage();
    page.setDefaultTimeout(15_000);
    try {
      await page.goto(`${server.origin}/dashboard/`);
      await page.getByTestId('login-key').fill(key);
      await page.getByTestId('login-submit').click();
      await page.getByTestId('nav-mcp-servers').click();
      await page.getByTestId('mcp-new').click();
      await page.getByTestId('mcp-name').fill('Hosted tools');
      await page.getByTestId('mcp-slug-input').fill('hosted');
      await page.getByTestId('mcp-url-input').fill(upstream.url);
      await page.getByTestId('mcp-auth-type').selectOption('oauth');
      await page.getByTestId('mcp-oauth-fields').waitFor();
      await page.getByTestId('mcp-save').click();
      await expect.poll(() => page.getByTestId('mcp-oauth-status').textContent()).toBe('OAuth: not connected');

      /**
       * The authorization server's own pages (sign in as `login`, consent), then back on the
       * dashboard by Warden's callback: a connect this session started is confirmed at once.
       */
      const signInAndConsent = async (login: string, landing = '#/mcp-servers/oauth/connected') => {
        await page.waitForURL((url) => url.origin === upstream.issuer);
        await page.locator('input[name="login"]').fill(login);
        await page.locator('input[name="password"]').fill('any');
        await page.locator('button[type="submit"]').click();
        await page.locator('button[type="submit"]', { hasText: 'Continue' }).click();
        await page.waitForURL((url) => url.origin === server.origin && url.hash.startsWith(landing));
      };
      await page.getByTestId('mcp-oauth-connect').click();
      await signInAndConsent('carol');
      await expect.poll(() => page.getByTestId('mcp-notice').textContent()).toContain('“hosted” connected');
      await expect.poll(() => page.getByTestId('mcp-oauth-status').textContent()).toBe('OAuth: connected');

      // and the agent's own connection: its calls act upstream as whoever consents for it (another
      // user: the authorization server's session, a cookie on the same host as Warden's, is ended)
      await context.clearCookies({ name: /^_session/ });
      await page.getByTestId('mcp-oauth-for-agent').click();
      await page.getByTestId('mcp-oauth-agent-select').selectOption('desk');
      await page.getByTestId('mcp-oauth-agent-connect').click();
      await signInAndConsent('erin');
      await expect.poll(() => page.getByTestId('mcp-oauth-agent').textContent()).toContain('desk: own connection');

      // a connect started elsewhere (with an API key) is shown before it is made
      await context.clearCookies({ name: /^_session/ });
      const started = await server.api('POST', '/mcp-servers/hosted/oauth/connect', { key });
      await page.goto(started.body.data.authorization_url);
      await signInAndConsent('carol', '#/mcp-servers/oauth/confirm/');
      await expect.poll(() => page.locator('.card p').textContent()).toContain('was started outside this dashboard session');
      await page.screenshot({ path: join(SCREENSHOTS, 'mcp-oauth-confirm.png'), fullPage: true });
      await page.getByTestId('mcp-oauth-confirm').click();
      await page.waitForURL((url) => url.hash.startsWith('#/mcp-servers/oauth/connected'));
      await expect.poll(() => page.getByTestId('mcp-oauth-status').textContent()).toBe('OAuth: connected');
      await page.screenshot({ path: join(SCREENSHOTS, 'mcp-oauth-connected.png'), fullPage: true });
      // the row, its OAuth buttons included, fits the page at 1280 px
      const fit = await page.getByTestId('mcp-table').evaluate((table) => ({
        container: (table.parentElement as HTMLElement).clientWidth,
        scroll: (table.parentElement as HTMLElement).scrollWidth,
      }));
      expect(fit.scroll).toBeLessThanOrEqual(fit.container);
    } finally {
      await context.close();
    }

    const client = await connectClient(`${server.url}/mcp/hosted`, { authorization: `Bearer ${AGENT_KEY}` });
    try {
      const result = (await client.callTool({ name: 'whoami', arguments: { text: 'from the desk' } })) as { content: { text: string }[] };
      expect(result.content[0]?.text).toBe('from the desk as erin');
    } finally {
      await client.close();
    }
    expect(upstream.authorizations().filter(Boolean).length).toBeGreaterThan(0);
    expect(upstream.authorizations().some((a) => a?.includes(AGENT_KEY))).toBe(false);
  });
});
