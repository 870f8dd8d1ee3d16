/** MCP servers: the registry agents reach through Warden. List, register, edit, delete; the server's refusals shown at the field. */
import { ApiError, api, withQuery } from '../api.ts';
import type { PageContext } from '../context.ts';
import { h, mount } from '../dom.ts';
import type { McpServer, McpServerCreate, McpServerPage, McpServerResponse, McpServerUpdate, McpTransport } from '../types.ts';
import { badge, busy, button, confirmInline, dash, field, fieldError, loading, notice, pageHeader, table, time } from '../ui.ts';
import { isOAuth, oauthActions, oauthCell, oauthFields, showOAuthOutcome } from './mcp-oauth.ts';

/** Each transport: its value, its label in the form, its short name in the table. */
const TRANSPORTS: [McpTransport, string, string][] = [
  ['auto', 'Auto (Streamable HTTP, else SSE)', 'Auto'],
  ['streamable_http', 'Streamable HTTP', 'Streamable HTTP'],
  ['sse', 'SSE (older servers)', 'SSE'],
];

/** Which field a refusal names: `transport_url: …`, `/body/slug …`, a slug taken (409). */
export function fieldOf(err: ApiError): 'name' | 'slug' | 'transport_url' | 'description' | null {
  const m = /^(?:\/?body\/)?(name|slug|transport_url|description)\b/.exec(err.message);
  if (m) return m[1] as 'name' | 'slug' | 'transport_url' | 'description';
  if (err.code === 'conflict') return 'slug';
  return null;
}

export async function mcpServersPage(ctx: PageContext): Promise<void> {
  const status = notice('mcp-notice');
  const list = h('div', null, loading());
  const more = h('div', { class: 'pager' });
  const formSlot = h('div');
  const canWrite = ctx.session.permissions.includes('mcp_servers:write');
  let rows: McpServer[] = [];
  let cursor: string | null = null;

  const load = async (append: boolean) => {
    try {
      const page = await api<McpServerPage>('GET', withQuery('/mcp-servers', { limit: 50, cursor: append ? cursor : null }));
      if (!ctx.alive()) return;
      rows = append ? [...rows, ...page.data] : page.data;
      cursor = page.has_more ? page.next_cursor : null;
      render();
      mount(more, cursor ? button('Load more servers', () => void load(true), { 'data-testid': 'mcp-more' }) : null);
    } catch (err) {
      if (ctx.alive()) status.error(err);
    }
  };

  const actions = (s: McpServer): HTMLElement => {
    const slot = h('div', { class: 'row-actions' });
    const idle = () =>
      canWrite
        ? mount(
            slot,
            ...(isOAuth(s.upstream_auth) ? oauthActions(s, s.upstream_auth, status, () => load(false)) : []),
            button('Edit', () => showForm(s), { class: 'btn btn-small', 'data-testid': 'mcp-edit', 'aria-label': `Edit ${s.name}` }),
            button('Delete…', () => ask(), {
              class: 'btn btn-small btn-danger',
              'data-testid': 'mcp-delete',
              'aria-label': `Delete ${s.name}`,
            }),
          )
        : mount(slot, h('span', { class: 'muted small' }, 'needs mcp_servers:write'));
    const ask = () =>
      confirmInline(slot, {
        text: `Delete “${s.name}”? Agents can no longer reach it through Warden (404 mcp_server_not_found).`,
        yes: 'Yes, delete',
        testid: 'mcp-delete',
        onCancel: idle,
        onYes: async (btn) => {
          status.clear();
          try {
            await busy(btn, () => api('DELETE', `/mcp-servers/${s.id}`));
            if (!ctx.alive()) return;
            status.ok(`“${s.name}” deleted.`);
            mount(formSlot);
            await load(false);
          } catch (err) {
            status.error(err);
            idle();
          }
        },
      });
    idle();
    return slot;
  };

  const render = () =>
    mount(
      list,
      table<McpServer>(
        'MCP servers, newest first',
        [
          {
            header: 'Server',
            // the description under the name: one column fewer keeps the row within the page
            cell: (s) =>
              h(
                'div',
                null,
                h('strong', null, s.name),
                h('div', { class: 'muted mono small', 'data-testid': 'mcp-slug' }, s.slug),
                s.description ? h('div', { class: 'muted small', 'data-testid': 'mcp-description-text' }, s.description) : null,
              ),
          },
          { header: 'URL', cell: (s) => h('span', { class: 'mono url', 'data-testid': 'mcp-url' }, s.transport_url) },
          { header: 'Transport', cell: (s) => TRANSPORTS.find(([v]) => v === s.transport)?.[2] ?? s.transport },
          {
            header: 'Status',
            cell: (s) => (s.enabled ? badge('Enabled', 'good', 'mcp-enabled') : badge('Disabled', 'neutral', 'mcp-enabled')),
          },
          {
            header: 'Upstream credential',
            cell: (s) => {
              const auth = s.upstream_auth;
              if (isOAuth(auth)) return oauthCell(s, auth, canWrite, status, () => load(false));
              return auth ? h('span', { class: 'mono small', 'data-testid': 'mcp-auth' }, `${auth.header}: ${auth.hint}`) : dash(null);
            },
          },
          { header: 'Updated', cell: (s) => time(s.updated_at) },
          { header: 'Actions', cell: actions },
        ],
        rows,
        { testid: 'mcp-table', rowTestid: 'mcp-row', rowId: (s) => s.id, empty: 'No MCP servers registered.' },
      ),
    );

  /** The register form, or the edit form of `existing`. */
  const showForm = (existing?: McpServer) => {
    const formStatus = notice('mcp-form-error');
    const text = (value: string, attrs: Record<string, string | number | boolean>) =>
      h('input', { type: 'text', autocomplete: 'off', spellcheck: 'false', value, ...attrs });
    const name = text(existing?.name ?? '', { maxlength: 200, required: true, 'data-testid': 'mcp-name' });
    const slug = text(existing?.slug ?? '', { maxlength: 64, 'data-testid': 'mcp-slug-input', placeholder: 'derived from the name' });
    const url = h('input', {
      type: 'url',
      autocomplete: 'off',
      spellcheck: 'false',
      maxlength: 2048,
      required: true,
      value: existing?.transport_url ?? '',
      placeholder: 'https://mcp.example.com/mcp',
      'data-testid': 'mcp-url-input',
    });
    const transport = h(
      'select',
      { 'data-testid': 'mcp-transport' },
      TRANSPORTS.map(([v, l]) => h('option', { value: v, selected: (existing?.transport ?? 'auto') === v }, l)),
    );
    const description = text(existing?.description ?? '', { maxlength: 2000, 'data-testid': 'mcp-description' });
    const enabled = h('input', { type: 'checkbox', checked: existing ? existing.enabled : true, 'data-testid': 'mcp-enabled-input' });
    // the secret is write-only: never filled in, only replaced (left empty: kept) or removed
    const current = existing?.upstream_auth;
    const currentLabel = isOAuth(current) ? 'OAuth connection' : current ? `${current.header}: ${current.hint}` : '';
    const authType = h(
      'select',
      { 'data-testid': 'mcp-auth-type', onchange: () => oauth.show(authType.value === 'oauth') },
      [
        ['keep', current ? `Keep the current one (${currentLabel})` : 'None'],
        ['bearer', 'Bearer token (Authorization)'],
        ['header', 'API-key header'],
        ['oauth', 'OAuth connection (an admin connects once)'],
        ...(current ? [['none', 'Remove it']] : []),
      ].map(([v, l]) => h('option', { value: v as string }, l as string)),
    );
    const oauth = oauthFields(isOAuth(current) ? current : undefined);
    const authHeader = text('', { maxlength: 100, placeholder: 'X-Api-Key', 'data-testid': 'mcp-auth-header' });
    const authSecret = h('input', { type: 'password', autocomplete: 'new-password', maxlength: 8192, 'data-testid': 'mcp-auth-secret' });
    /** What the form sends as upstream_auth: undefined keeps the stored one. */
    const upstreamAuth = (): McpServerCreate['upstream_auth'] | null | undefined => {
      if (authType.value === 'none') return null;
      if (authType.value === 'bearer') return { type: 'bearer', secret: authSecret.value };
      if (authType.value === 'header') return { type: 'header', header: authHeader.value.trim(), secret: authSecret.value };
      if (authType.value === 'oauth') return oauth.value();
      return undefined;
    };
    const errors = {
      name: fieldError(name, 'mcp-name-error'),
      slug: fieldError(slug, 'mcp-slug-error'),
      transport_url: fieldError(url, 'mcp-url-error'),
      description: fieldError(description, 'mcp-description-error'),
    };
    const controls = { name, slug, transport_url: url, description };
    const submit = h(
      'button',
      { type: 'submit', class: 'btn btn-primary', 'data-testid': 'mcp-save' },
      existing ? 'Save changes' : 'Register server',
    );
    const form = h(
      'form',
      {
        class: 'card form',
        novalidate: true,
        'aria-labelledby': 'mcp-form-title',
        'data-testid': 'mcp-form',
        onsubmit: async (event: Event) => {
          event.preventDefault();
          formStatus.clear();
          for (const e of Object.values(errors)) e.show(null);
          if (!name.value.trim()) {
            errors.name.show('A server needs a name.');
            name.focus();
            return;
          }
          if (!url.value.trim()) {
            errors.transport_url.show('Enter the server’s MCP endpoint, an absolute http(s) URL.');
            url.focus();
            return;
          }
          try {
            let saved: McpServer;
            if (existing) {
              const body: McpServerUpdate = {
                name: name.value.trim(),
                transport: transport.value as McpTransport,
                description: description.value.trim() || null,
                enabled: enabled.checked,
              };
              if (slug.value.trim() !== existing.slug) body.slug = slug.value.trim();
              if (url.value.trim() !== existing.transport_url) body.transport_url = url.value.trim();
              const auth = upstreamAuth();
              if (auth !== undefined) body.upstream_auth = auth;
              saved = (await busy(submit, () => api<McpServerResponse>('PATCH', `/mcp-servers/${existing.id}`, body))).data;
            } else {
              const body: McpServerCreate = {
                name: name.value.trim(),
                transport_url: url.value.trim(),
                transport: transport.value as McpTransport,
                enabled: enabled.checked,
              };
              if (slug.value.trim()) body.slug = slug.value.trim();
              if (description.value.trim()) body.description = description.value.trim();
              const auth = upstreamAuth();
              if (auth) body.upstream_auth = auth;
              saved = (await busy(submit, () => api<McpServerResponse>('POST', '/mcp-servers', body))).data;
            }
            if (!ctx.alive()) return;
            mount(formSlot);
            status.ok(existing ? `“${saved.name}” saved.` : `“${saved.name}” registered as ${saved.slug}.`);
            await load(false);
          } catch (err) {
            const at = err instanceof ApiError ? fieldOf(err) : null;
            if (at && err instanceof ApiError) {
              errors[at].show(err.message.replace(/^(?:\/?body\/)?[a-z_]+:?\s*/, '') || err.message);
              controls[at].focus();
            }
            formStatus.error(err);
          }
        },
      },
      h('h2', { id: 'mcp-form-title' }, existing ? `Edit ${existing.name}` : 'Register an MCP server'),
      h(
        'div',
        { class: 'grid-2' },
        h('div', null, field('Name', name), errors.name.el),
        h(
          'div',
          null,
          field('Slug', slug, 'Lower-case letters, digits and inner hyphens; policies match on it (match.server).'),
          errors.slug.el,
        ),
      ),
      field(
        'MCP endpoint URL',
        url,
        'Checked by the egress guard when you save: private and loopback addresses are refused unless the operator allows them in WARDEN_EGRESS_ALLOWLIST.',
      ),
      errors.transport_url.el,
      h(
        'div',
        { class: 'grid-2' },
        field('Transport', transport),
        h('div', { class: 'field' }, h('span', { class: 'label' }, 'Status'), h('label', { class: 'check' }, enabled, ' Enabled')),
      ),
      field('Description (optional)', description),
      errors.description.el,
      h(
        'div',
        { class: 'grid-2' },
        field('Upstream credential', authType, 'Warden sends it to this server for every agent; agents never hold it.'),
        field('Header (API-key header only)', authHeader),
      ),
      field('Secret', authSecret, 'Write-only: stored encrypted, shown afterwards as its last four characters only.'),
      oauth.el,
      formStatus.el,
      h(
        'div',
        { class: 'row' },
        submit,
        button('Cancel', () => mount(formSlot), { 'data-testid': 'mcp-cancel' }),
      ),
    );
    mount(formSlot, form);
    form.scrollIntoView({ block: 'nearest' });
    name.focus();
  };

  mount(
    ctx.root,
    pageHeader(
      'MCP servers',
      button('Refresh', () => void load(false), { 'data-testid': 'mcp-refresh' }),
      canWrite ? button('Register server', () => showForm(), { class: 'btn btn-primary', 'data-testid': 'mcp-new' }) : null,
    ),
    h(
      'p',
      { class: 'lead' },
      'The only places an agent’s MCP calls may go. Which tools it may call is decided by policy rules (match on server and tool) and by the agent’s allowed tools.',
    ),
    formSlot,
    status.el,
    list,
    more,
  );
  showOAuthOutcome(ctx.params, status);
  await load(false);
}
