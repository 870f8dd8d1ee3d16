/**
 * The OAuth connection of an MCP server, on the MCP servers page: its state and the Connect /
 * Disconnect buttons in the table, its fields in the form, and the notice the callback's return
 * (#/mcp-servers/oauth/<connected|failed>?server=…&detail=…) shows.
 */
import { api, withQuery } from '../api.ts';
import type { PageContext } from '../context.ts';
import { h, mount } from '../dom.ts';
import type {
  AgentPage,
  McpServer,
  McpServerOAuthAuthorizationResponse,
  McpServerOAuthConfirmationResponse,
  McpServerResponse,
  UpstreamOAuth,
  UpstreamOAuthInput,
} from '../types.ts';
import { badge, busy, button, field, loading, type Notice, notice, pageHeader } from '../ui.ts';

const STATUS: Record<UpstreamOAuth['status'], [string, 'good' | 'warn' | 'bad']> = {
  connected: ['OAuth: connected', 'good'],
  not_connected: ['OAuth: not connected', 'warn'],
  reauthorization_required: ['OAuth: connect again', 'bad'],
};

export const isOAuth = (auth: McpServer['upstream_auth'] | undefined): auth is UpstreamOAuth => auth?.type === 'oauth';

/** The credential cell: the workspace's connection, then each agent's own, and why one needs an admin. */
export function oauthCell(s: McpServer, auth: UpstreamOAuth, canWrite: boolean, status: Notice, reload: () => Promise<void>): HTMLElement {
  const [label, tone] = STATUS[auth.status];
  return h(
    'div',
    { class: 'stack' },
    badge(label, tone, 'mcp-oauth-status'),
    auth.status_detail ? h('div', { class: 'muted small', 'data-testid': 'mcp-oauth-detail' }, auth.status_detail) : null,
    ...auth.agents.map((a) =>
      h(
        'div',
        { class: 'small', 'data-testid': 'mcp-oauth-agent' },
        h('span', { class: 'mono' }, a.agent),
        a.status === 'connected' ? ': own connection ' : ': connect again ',
        canWrite
          ? button('Disconnect', () => void disconnect(s, a.agent, status, reload), {
              class: 'btn btn-small',
              'data-testid': 'mcp-oauth-agent-disconnect',
              'aria-label': `Disconnect ${a.agent} from ${s.name}`,
            })
          : null,
      ),
    ),
  );
}

/** Sends the browser to the authorization server to connect the workspace, or `agent`. */
async function connect(s: McpServer, agent: string | undefined, btn: HTMLButtonElement, status: Notice): Promise<void> {
  status.clear();
  try {
    const started = await busy(btn, () =>
      api<McpServerOAuthAuthorizationResponse>('POST', `/mcp-servers/${s.id}/oauth/connect`, agent ? { agent } : undefined),
    );
    location.assign(started.data.authorization_url);
  } catch (err) {
    status.error(err);
  }
}

async function disconnect(s: McpServer, agent: string | undefined, status: Notice, reload: () => Promise<void>): Promise<void> {
  status.clear();
  try {
    await api('DELETE', withQuery(`/mcp-servers/${s.id}/oauth/connection`, { agent: agent ?? null }));
    status.ok(`${agent ? `${agent}’s connection to “${s.name}”` : `“${s.name}”`} disconnected: Warden no longer holds its tokens.`);
    await reload();
  } catch (err) {
    status.error(err);
  }
}

/**
 * The row's OAuth actions, for writers: Connect (the workspace's connection), Disconnect once
 * connected, and Connect for an agent (its own upstream identity), which asks which agent.
 */
export function oauthActions(s: McpServer, auth: UpstreamOAuth, status: Notice, reload: () => Promise<void>): HTMLElement[] {
  const connectButton: HTMLButtonElement = button(
    auth.status === 'not_connected' ? 'Connect' : 'Reconnect',
    () => void connect(s, undefined, connectButton, status),
    { class: 'btn btn-small', 'data-testid': 'mcp-oauth-connect', 'aria-label': `Connect ${s.name} by OAuth` },
  );
  const disconnectButton = button('Disconnect', () => void disconnect(s, undefined, status, reload), {
    class: 'btn btn-small',
    'data-testid': 'mcp-oauth-disconnect',
    'aria-label': `Disconnect ${s.name}`,
  });
  const forAgent = h('span', { class: 'row-actions' });
  const askAgent = async () => {
    try {
      const agents = await api<AgentPage>('GET', withQuery('/agents', { limit: 100 }));
      const select = h(
        'select',
        { 'data-testid': 'mcp-oauth-agent-select', 'aria-label': 'Agent' },
        agents.data.map((a) => h('option', { value: a.slug }, a.slug)),
      );
      const go: HTMLButtonElement = button('Connect', () => void connect(s, select.value, go, status), {
        class: 'btn btn-small',
        'data-testid': 'mcp-oauth-agent-connect',
      });
      mount(forAgent, select, go);
    } catch (err) {
      status.error(err);
    }
  };
  mount(
    forAgent,
    button('For an agent…', () => void askAgent(), {
      class: 'btn btn-small',
      'data-testid': 'mcp-oauth-for-agent',
      'aria-label': `Connect ${s.name} by OAuth for one agent`,
    }),
  );
  return [connectButton, ...(auth.status === 'connected' ? [disconnectButton] : []), forAgent];
}

/** The form's OAuth fields (shown when the credential is an OAuth connection) and the upstream_auth they make. */
export function oauthFields(existing?: UpstreamOAuth) {
  const input = (testid: string, attrs: Record<string, string | number>) =>
    h('input', { type: 'text', autocomplete: 'off', spellcheck: 'false', 'data-testid': testid, ...attrs });
  const scopes = input('mcp-oauth-scopes', { maxlength: 2000, placeholder: 'repo read:org', value: existing?.scopes.join(' ') ?? '' });
  const server = input('mcp-oauth-server', { maxlength: 2048, placeholder: 'found from the server’s metadata' });
  const clientId = input('mcp-oauth-client-id', { maxlength: 512, placeholder: 'Warden registers itself' });
  const clientSecret = h('input', {
    type: 'password',
    autocomplete: 'new-password',
    maxlength: 1024,
    'data-testid': 'mcp-oauth-client-secret',
  });
  const el = h(
    'div',
    { 'data-testid': 'mcp-oauth-fields', hidden: true },
    h(
      'div',
      { class: 'grid-2' },
      field('Scopes (optional)', scopes, 'Space-separated; empty: those the server publishes.'),
      field('Authorization server (optional)', server, 'Its issuer URL; empty: found from the server (RFC 9728).'),
    ),
    h(
      'div',
      { class: 'grid-2' },
      field(
        'Client ID (optional)',
        clientId,
        'For a client registered by hand; its redirect URI is this origin + /oauth/upstream/callback.',
      ),
      field('Client secret (optional)', clientSecret, 'Write-only, stored encrypted.'),
    ),
  );
  const value = (): UpstreamOAuthInput => {
    const list = scopes.value.split(/\s+/).filter(Boolean);
    return {
      type: 'oauth',
      ...(list.length > 0 ? { scopes: list } : {}),
      ...(server.value.trim() ? { authorization_server: server.value.trim() } : {}),
      ...(clientId.value.trim() ? { client_id: clientId.value.trim() } : {}),
      ...(clientSecret.value ? { client_secret: clientSecret.value } : {}),
    };
  };
  return { el, value, show: (on: boolean) => el.toggleAttribute('hidden', !on) };
}

/** The notice of the callback's return, if the page was opened by it. */
export function showOAuthOutcome(params: string[], status: Notice): void {
  const [outcome, query] = params;
  if (!outcome) return;
  const shown = new URLSearchParams(query ?? '');
  const agent = shown.get('agent');
  const server = `“${shown.get('server') ?? 'the server'}”${agent ? ` for ${agent}` : ''}`;
  if (outcome === 'connected') status.ok(`${server} connected: Warden holds its OAuth tokens and refreshes them; agents never see them.`);
  else status.error(new Error(`Connecting ${server} failed: ${shown.get('detail') ?? 'the authorization server refused'}.`));
}

/**
 * Where the OAuth callback sends the browser (#/mcp-servers/oauth/confirm/<id>): a connection
 * this session started is confirmed at once; one someone else started is shown, to confirm or not.
 */
export async function oauthConfirmPage(ctx: PageContext): Promise<void> {
  const id = ctx.params[0] ?? '';
  const status = notice('mcp-oauth-confirm-notice');
  const slot = h('div', null, loading());
  mount(ctx.root, pageHeader('Confirm an OAuth connection'), status.el, slot);
  const confirm = async (btn?: HTMLButtonElement) => {
    try {
      const run = () => api<McpServerResponse>('POST', `/mcp-server-oauth/confirmations/${id}`);
      const server = (await (btn ? busy(btn, run) : run())).data;
      if (!ctx.alive()) return;
      ctx.navigate(`#/mcp-servers/oauth/connected?${new URLSearchParams({ server: server.slug, ...(agent ? { agent } : {}) })}`);
    } catch (err) {
      if (ctx.alive()) status.error(err);
    }
  };
  let agent: string | null = null;
  try {
    const pending = (await api<McpServerOAuthConfirmationResponse>('GET', `/mcp-server-oauth/confirmations/${id}`)).data;
    if (!ctx.alive()) return;
    agent = pending.agent;
    if (pending.started_by_you) {
      await confirm();
      return;
    }
    const yes: HTMLButtonElement = button('Connect', () => void confirm(yes), {
      class: 'btn btn-primary',
      'data-testid': 'mcp-oauth-confirm',
    });
    mount(
      slot,
      h(
        'div',
        { class: 'card' },
        h(
          'p',
          null,
          `Connecting “${pending.server_name}” (${pending.server})`,
          pending.agent ? ` for the agent ${pending.agent}` : ' for the whole workspace',
          ' was started outside this dashboard session (with an API key, or by someone else).',
          ` Connecting it gives Warden the identity you just consented as at ${pending.authorization_server}`,
          pending.scopes.length > 0 ? ` (${pending.scopes.join(' ')})` : '',
          ': agents will act upstream as you.',
        ),
        h(
          'div',
          { class: 'row' },
          yes,
          button('Do not connect', () => ctx.navigate('#/mcp-servers'), { 'data-testid': 'mcp-oauth-cancel' }),
        ),
      ),
    );
  } catch (err) {
    if (!ctx.alive()) return;
    mount(slot, h('p', null, h('a', { href: '#/mcp-servers' }, 'MCP servers')));
    status.error(err);
  }
}
