/**
 * The Warden dashboard: a single-page app over /dashboard/api with hash routing (#/webhooks …).
 * Session: the cookie is HttpOnly (set by the server); only the CSRF token is held, in memory.
 */
import { ApiError, api, describeError, setCsrfToken, setUnauthorizedHandler } from './api.ts';
import type { Page, PageContext } from './context.ts';
import { h, mount } from './dom.ts';
import { agentsPage } from './pages/agents.ts';
import { approvalsPage } from './pages/approvals.ts';
import { auditPage } from './pages/audit.ts';
import { billingPage } from './pages/billing.ts';
import { compliancePage } from './pages/compliance.ts';
import { keysPage } from './pages/keys.ts';
import { loginPage } from './pages/login.ts';
import { oauthConfirmPage } from './pages/mcp-oauth.ts';
import { mcpServersPage } from './pages/mcp-servers.ts';
import { oauthConsentPage, oauthGrantsPage } from './pages/oauth.ts';
import { overviewPage } from './pages/overview.ts';
import { policiesPage, policyEditorPage } from './pages/policies.ts';
import { settingsPage } from './pages/settings.ts';
import { webhookDetailPage, webhookNewPage, webhooksPage } from './pages/webhooks.ts';
import type { Session, SessionData } from './types.ts';
import { loading, notice } from './ui.ts';

interface Route {
  pattern: RegExp;
  page: Page;
  nav: string;
  title: string;
}

const NAV: { hash: string; label: string; testid: string }[] = [
  { hash: '#/overview', label: 'Overview', testid: 'nav-overview' },
  { hash: '#/webhooks', label: 'Webhooks', testid: 'nav-webhooks' },
  { hash: '#/approvals', label: 'Approvals', testid: 'nav-approvals' },
  { hash: '#/audit', label: 'Audit log', testid: 'nav-audit' },
  { hash: '#/policies', label: 'Policies', testid: 'nav-policies' },
  { hash: '#/agents', label: 'Agents', testid: 'nav-agents' },
  { hash: '#/mcp-servers', label: 'MCP servers', testid: 'nav-mcp-servers' },
  { hash: '#/keys', label: 'API keys', testid: 'nav-keys' },
  { hash: '#/oauth-grants', label: 'Connected clients', testid: 'nav-oauth-grants' },
  { hash: '#/compliance', label: 'Compliance', testid: 'nav-compliance' },
  { hash: '#/settings', label: 'Settings', testid: 'nav-settings' },
  { hash: '#/billing', label: 'Billing', testid: 'nav-billing' },
];

const ROUTES: Route[] = [
  { pattern: /^#\/webhooks\/?$/, page: webhooksPage, nav: '#/webhooks', title: 'Webhooks' },
  { pattern: /^#\/webhooks\/new$/, page: webhookNewPage, nav: '#/webhooks', title: 'New webhook endpoint' },
  { pattern: /^#\/webhooks\/([0-9a-fA-F-]{36})$/, page: webhookDetailPage, nav: '#/webhooks', title: 'Webhook endpoint' },
  { pattern: /^#\/approvals\/?$/, page: approvalsPage, nav: '#/approvals', title: 'Approvals' },
  { pattern: /^#\/audit\/?$/, page: auditPage, nav: '#/audit', title: 'Audit log' },
  { pattern: /^#\/compliance\/?$/, page: compliancePage, nav: '#/compliance', title: 'Compliance' },
  { pattern: /^#\/overview\/?$/, page: overviewPage, nav: '#/overview', title: 'Overview' },
  { pattern: /^#\/policies\/?$/, page: policiesPage, nav: '#/policies', title: 'Policies' },
  { pattern: /^#\/policies\/new$/, page: policyEditorPage, nav: '#/policies', title: 'New policy' },
  { pattern: /^#\/policies\/([0-9a-fA-F-]{36})$/, page: policyEditorPage, nav: '#/policies', title: 'Policy' },
  { pattern: /^#\/mcp-servers\/?$/, page: mcpServersPage, nav: '#/mcp-servers', title: 'MCP servers' },
  // where an OAuth connection's callback sends the browser back (http/upstream-oauth-callback.ts)
  { pattern: /^#\/mcp-servers\/oauth\/(connected|failed)\?(.*)$/, page: mcpServersPage, nav: '#/mcp-servers', title: 'MCP servers' },
  {
    pattern: /^#\/mcp-servers\/oauth\/confirm\/([A-Za-z0-9_-]{43})$/,
    page: oauthConfirmPage,
    nav: '#/mcp-servers',
    title: 'Confirm an OAuth connection',
  },
  { pattern: /^#\/keys\/?$/, page: keysPage, nav: '#/keys', title: 'API keys' },
  { pattern: /^#\/oauth-grants\/?$/, page: oauthGrantsPage, nav: '#/oauth-grants', title: 'Connected clients' },
  { pattern: /^#\/oauth\/consent\/([0-9a-fA-F-]{36})$/, page: oauthConsentPage, nav: '#/oauth-grants', title: 'Connect an MCP client' },
  { pattern: /^#\/agents\/?$/, page: agentsPage, nav: '#/agents', title: 'Agents' },
  { pattern: /^#\/settings\/?$/, page: settingsPage, nav: '#/settings', title: 'Settings' },
  { pattern: /^#\/billing\/?$/, page: billingPage, nav: '#/billing', title: 'Billing' },
];

const app = document.getElementById('app') as HTMLElement;
let session: SessionData | null = null;
let generation = 0;

function setSession(next: SessionData | null): void {
  session = next;
  setCsrfToken(next?.csrf_token ?? null);
}

function header(current: SessionData): HTMLElement {
  const logout = h(
    'button',
    {
      type: 'button',
      class: 'btn btn-quiet',
      'data-testid': 'logout',
      onclick: async () => {
        logout.disabled = true;
        try {
          await api('DELETE', '/session');
        } catch {
          // the session may already be gone; log out locally either way
        }
        setSession(null);
        render('You are signed out.');
      },
    },
    'Log out',
  );
  return h(
    'header',
    { class: 'topbar' },
    h(
      'div',
      { class: 'brand' },
      h('span', { class: 'logo', 'aria-hidden': 'true' }, 'W'),
      h(
        'div',
        null,
        h('div', { class: 'brand-name' }, 'Warden'),
        h(
          'div',
          { class: 'workspace', 'data-testid': 'workspace-name' },
          current.workspace.name,
          h(
            'span',
            { class: 'muted' },
            ` · ${current.workspace.slug} · plan `,
            h('span', { 'data-testid': 'workspace-plan' }, current.workspace.plan),
          ),
        ),
      ),
    ),
    h('div', { class: 'who' }, h('span', { class: 'muted', 'data-testid': 'key-name' }, `Key: ${current.key_name}`), logout),
  );
}

function nav(active: string): HTMLElement {
  return h(
    'nav',
    { class: 'sidenav', 'aria-label': 'Sections' },
    h(
      'ul',
      null,
      NAV.map((item) =>
        h(
          'li',
          null,
          h(
            'a',
            {
              href: item.hash,
              'data-testid': item.testid,
              'aria-current': item.hash === active ? 'page' : null,
              class: item.hash === active ? 'active' : null,
            },
            item.label,
          ),
        ),
      ),
    ),
  );
}

/** Renders the shell and the page of the current hash (or the login form without a session). */
function render(loginMessage?: string): void {
  generation += 1;
  const mine = generation;
  if (!session) {
    document.title = 'Sign in · Warden';
    mount(app);
    loginPage(app, loginMessage, (next) => {
      setSession(next);
      render();
    });
    return;
  }
  const hash = location.hash || '#/webhooks';
  let route: Route | undefined;
  let params: string[] = [];
  for (const candidate of ROUTES) {
    const match = candidate.pattern.exec(hash);
    if (match) {
      route = candidate;
      params = match.slice(1);
      break;
    }
  }
  if (!route) {
    location.replace('#/webhooks');
    return;
  }
  document.title = `${route.title} · Warden`;
  const root = h('div', { class: 'page', 'data-testid': `page-${route.nav.slice(2)}` });
  const main = h('main', { id: 'main', class: 'content' }, root);
  mount(app, header(session), h('div', { class: 'layout' }, nav(route.nav), main));
  const ctx: PageContext = {
    root,
    params,
    session,
    alive: () => mine === generation,
    navigate: (next) => {
      if (location.hash === next) render();
      else location.hash = next;
    },
    updateSession: (patch) => {
      if (!session) return;
      setSession({ ...session, ...patch });
      const old = app.querySelector('header.topbar');
      if (old && session) old.replaceWith(header(session));
    },
  };
  const focusTitle = () => (root.querySelector('h1') as HTMLElement | null)?.focus({ preventScroll: true });
  Promise.resolve(route.page(ctx))
    .then(() => {
      if (ctx.alive() && document.activeElement === document.body) focusTitle();
    })
    .catch((err: unknown) => {
      if (!ctx.alive()) return;
      const n = notice('page-error');
      n.error(err);
      mount(root, h('h1', { tabindex: -1 }, route.title), n.el);
    });
}

async function start(): Promise<void> {
  mount(app, loading());
  setUnauthorizedHandler(() => {
    if (!session) return;
    setSession(null);
    render('Your session has ended. Sign in again.');
  });
  try {
    const current = await api<Session>('GET', '/session');
    setSession(current.data);
  } catch (err) {
    setSession(null);
    if (!(err instanceof ApiError && err.status === 401)) {
      render(describeError(err));
      return;
    }
  }
  render();
}

window.addEventListener('hashchange', () => render());
void start();
