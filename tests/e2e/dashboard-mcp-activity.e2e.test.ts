/**
 * Issue 38, "MCP activity in plain view": the audit table named neither the MCP server nor the
 * tool (`mcp.call`), and at 1280 px it was 1,112 px wide in a 1,023 px container, its Details
 * column clipped; every MCP approval was titled "mcp.call by desktop". Here an unmodified MCP
 * SDK client calls tools through the gateway, and the dashboard, in headless Chromium at 1280
 * and 1920 px, shows each row's server and tool and an approval titled by its act, with the
 * table inside its container; the overview's chart of blocked acts names a blocked call by its
 * server and tool (it said `mcp.call`), the audit search finds the calls by their server, and a
 * row shows the arguments a call was sent when asked, secrets redacted.
 * Screenshots: test-output/screenshots/mcp-activity-*.png.
 */
import { existsSync, mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { type Browser, chromium } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CountingUpstream, connectClient, startCountingUpstream } from '../mcp-gateway/support.ts';
import { keyFor, useTestServer } from '../support/server.ts';

const CHROMIUM = '/usr/bin/chromium';
const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'];
const HAS_CHROMIUM = existsSync(CHROMIUM);
const SCREENSHOTS = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'test-output', 'screenshots');

describe.skipIf(!HAS_CHROMIUM && process.env.CI !== 'true')('MCP activity in the dashboard (e2e)', () => {
  const server = useTestServer({ egressAllowlist: ['127.0.0.1/32'] });
  let upstream: CountingUpstream;
  let client: Client;
  let browser: Browser;
  let key: string;

  beforeAll(async () => {
    mkdirSync(SCREENSHOTS, { recursive: true });
    upstream = await startCountingUpstream();
    key = await keyFor(server, '*', 'mcp-activity');
    const agentKey = `ak_activity_${Math.random().toString(36).slice(2)}`;
    const api = (path: string, body: unknown) => server.api('POST', path as '/agents', { key, body, unchecked: true });
    expect((await api('/mcp-servers', { name: 'Tools', slug: 'tools', transport_url: upstream.url })).status).toBe(201);
    expect((await api('/agents', { name: 'Desktop', slug: 'desktop', provider: 'local', api_key: agentKey })).status).toBe(201);
    expect(
      (
        await api('/policies', {
          name: 'Ask before wiping',
          rules: [
            { match: { tool: ['delete_everything'] }, effect: 'require_approval' },
            { match: { tool: ['wipe'] }, effect: 'block' },
          ],
        })
      ).status,
    ).toBe(201);
    client = await connectClient(`${server.url}/mcp/tools`, { authorization: `Bearer ${agentKey}` });
    await client.callTool({ name: 'echo', arguments: { text: 'hello', api_key: 'sk-live-not-for-eyes' } });
    await client.callTool({ name: 'add', arguments: { a: 2, b: 3 } });
    // held for approval: answered with the approval's id (the gateway's short wait ends first)
    await client
      .callTool({ name: 'delete_everything', arguments: { path: '/srv/very/long/path/to/somewhere/that/does/not/fit/in/a/cell' } })
      .catch(() => undefined);
    // blocked twice: the chart's top entry
    for (let i = 0; i < 2; i++) await client.callTool({ name: 'wipe', arguments: { all: true } }).catch(() => undefined);
    browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS, headless: true });
  }, 120_000);

  afterAll(async () => {
    await client?.close().catch(() => undefined);
    await browser?.close().catch(() => undefined);
    await upstream?.close();
  });

  it('the approval is titled by its act', async () => {
    const approvals = (await server.api('GET', '/approvals', { key, query: { status: 'pending' } })).body.data;
    expect(approvals.map((a: { title: string }) => a.title)).toContain('tools/call tools delete_everything by desktop');
  });

  /** A page signed in to the dashboard with the workspace's key. */
  async function signedIn(width: number) {
    const context = await browser.newContext({ viewport: { width, height: 900 } });
    const page = await context.newPage();
    page.setDefaultTimeout(15_000);
    await page.goto(server.url.replace('/api/v1', '/dashboard/'));
    await page.getByTestId('login-key').fill(key);
    await page.getByTestId('login-submit').click();
    return { context, page };
  }

  it('the chart of blocked acts names the server and the tool, and a search by server finds the calls', async () => {
    const { context, page } = await signedIn(1280);
    await page.getByTestId('nav-overview').click();
    const chart = (await page.getByTestId('chart-blocked-actions-table').textContent()) ?? '';
    expect(chart).toContain('tools \u2192 wipe2');
    expect(chart).not.toContain('mcp.call');
    await page.screenshot({ path: join(SCREENSHOTS, 'mcp-activity-overview-1280.png'), fullPage: true });

    await page.getByTestId('nav-audit').click();
    await page.getByTestId('audit-table').waitFor();
    await page.getByTestId('audit-filter-search').fill('tools');
    await page.getByTestId('audit-apply').click();
    await page.waitForFunction(() => document.querySelectorAll('[data-testid="audit-target"]').length >= 5);
    const found = await page.getByTestId('audit-target').allTextContents();
    expect(new Set(found)).toEqual(
      new Set(['tools \u2192 echo', 'tools \u2192 add', 'tools \u2192 delete_everything', 'tools \u2192 wipe']),
    );
    await context.close();
  }, 60_000);

  it('a call is one row with how it ended; the filters pick by source, server, tool and outcome', async () => {
    const { context, page } = await signedIn(1280);
    await page.getByTestId('nav-audit').click();
    await page.getByTestId('audit-table').waitFor();
    await page.getByTestId('audit-filter-tool').fill('echo');
    await page.getByTestId('audit-filter-server').fill('tools');
    await page.getByTestId('audit-filter-source').selectOption('mcp');
    await page.getByTestId('audit-apply').click();
    await expect.poll(() => page.getByTestId('audit-row').count()).toBe(1);
    const row = page.getByTestId('audit-row');
    expect(await row.getByTestId('audit-act-outcome').textContent()).toBe('Succeeded');
    expect(await row.textContent()).toContain('mcp://tools/tools/echo');
    await row.locator('[data-testid="audit-details"] > summary').click();
    expect(await row.getByTestId('audit-outcome').textContent()).toBe('"succeeded"');
    expect(await row.getByTestId('audit-outcome-event').textContent()).toMatch(/^[0-9a-f-]{36} · seq\. (\d+|unsealed)$/);

    // blocked calls never ran: no outcome to wait for
    await page.getByTestId('audit-clear').click();
    await page.getByTestId('audit-filter-tool').fill('wipe');
    await page.getByTestId('audit-apply').click();
    await expect.poll(() => page.getByTestId('audit-row').count()).toBe(2);
    expect(await page.getByTestId('audit-act-outcome').allTextContents()).toEqual(['not run', 'not run']);

    // by outcome: the two calls that succeeded (echo and add)
    await page.getByTestId('audit-clear').click();
    await page.getByTestId('audit-filter-outcome').selectOption('succeeded');
    await page.getByTestId('audit-apply').click();
    await expect.poll(() => page.getByTestId('audit-row').count()).toBe(2);
    expect(new Set(await page.getByTestId('audit-target').allTextContents())).toEqual(new Set(['tools \u2192 echo', 'tools \u2192 add']));
    await page.screenshot({ path: join(SCREENSHOTS, 'mcp-activity-acts-1280.png'), fullPage: true });
    await context.close();
  }, 60_000);

  it('a row shows what the call was sent on demand, secrets redacted', async () => {
    const { context, page } = await signedIn(1280);
    await page.getByTestId('nav-audit').click();
    await page.getByTestId('audit-table').waitFor();
    // the call's row (the audit reads as acts: its outcome is folded into it)
    const row = page
      .locator('tr')
      .filter({ has: page.getByTestId('audit-arguments') })
      .filter({ hasText: 'tools \u2192 echo' });
    await expect.poll(() => row.count()).toBe(1);
    await row.locator('[data-testid="audit-details"] > summary').click();
    const shown = row.getByTestId('audit-arguments');
    expect(await shown.locator('pre').isVisible()).toBe(false);
    await shown.locator('summary').click();
    expect(JSON.parse((await shown.locator('pre').textContent()) ?? '')).toEqual({ text: 'hello', api_key: '[redacted]' });
    expect(await page.content()).not.toContain('sk-live-not-for-eyes');
    await page.screenshot({ path: join(SCREENSHOTS, 'mcp-activity-arguments-1280.png'), fullPage: true });
    await context.close();
  }, 60_000);

  for (const width of [1280, 1920]) {
    it(`at ${width} px the audit rows name the server and the tool, and the table fits its container`, async () => {
      const { context, page } = await signedIn(width);
      await page.getByTestId('nav-audit').click();
      await page.getByTestId('audit-table').waitFor();
      const targets = await page.getByTestId('audit-target').allTextContents();
      expect(targets).toEqual(
        expect.arrayContaining(['tools \u2192 echo', 'tools \u2192 add', 'tools \u2192 delete_everything', 'tools \u2192 wipe']),
      );
      // open every row's details: the widest the table gets
      for (const summary of await page.locator('[data-testid="audit-details"] summary').all()) await summary.click();
      const fit = await page.getByTestId('audit-table').evaluate((table) => ({
        table: table.getBoundingClientRect().width,
        container: (table.parentElement as HTMLElement).clientWidth,
        scroll: (table.parentElement as HTMLElement).scrollWidth,
      }));
      // and no cell's content spills into the next one (a badge or identifier wider than its column)
      const spills = await page
        .getByTestId('audit-table')
        .evaluate((table) =>
          [...table.querySelectorAll('td')].filter((td) => td.scrollWidth > td.clientWidth + 1).map((td) => td.getAttribute('data-label')),
        );
      expect(spills).toEqual([]);
      expect(fit.scroll).toBeLessThanOrEqual(fit.container);
      expect(fit.table).toBeLessThanOrEqual(fit.container + 1);
      await page.screenshot({ path: join(SCREENSHOTS, `mcp-activity-audit-${width}.png`), fullPage: true });
      await context.close();
    }, 60_000);
  }

  it('an admin who keeps digests only (Settings) gets calls recorded without their arguments', async () => {
    const { context, page } = await signedIn(1280);
    await page.getByTestId('nav-settings').click();
    // the page has read the settings (the stats show them) before the choice is made, or its read would undo it
    await page.getByTestId('settings-current-production').waitFor();
    const kept = page.getByTestId('settings-audit-mcp-arguments');
    expect(await kept.inputValue()).toBe('redacted');
    await kept.selectOption('digest');
    await page.getByTestId('settings-audit-save').click();
    await page.getByTestId('settings-audit-notice').getByText('Saved').waitFor();
    await page.screenshot({ path: join(SCREENSHOTS, 'settings-audit-arguments-1280.png'), fullPage: true });
    expect((await server.api('GET', '/settings', { key })).body.data.audit_mcp_arguments).toBe('digest');

    await client.callTool({ name: 'echo', arguments: { text: 'only-the-hash-please' } });
    await page.getByTestId('nav-audit').click();
    await page.getByTestId('audit-table').waitFor();
    const echoes = page.locator('tr').filter({ hasText: 'tools \u2192 echo' });
    await expect.poll(() => echoes.count()).toBe(2); // two calls, one row each (the audit reads as acts)
    // the earlier call keeps its arguments; the new one has its hash only
    expect(
      await page
        .locator('tr')
        .filter({ has: page.getByTestId('audit-arguments') })
        .filter({ hasText: 'tools \u2192 echo' })
        .count(),
    ).toBe(1);
    expect(await page.content()).not.toContain('only-the-hash-please');
    await context.close();
  }, 60_000);
});
