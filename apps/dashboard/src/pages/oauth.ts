/**
 * OAuth on the built-in authorization server: the consent page an MCP client's authorize step
 * sends the browser to (which agent the client will act as, which servers it may reach, with
 * which scopes), and the grants given, each revocable.
 */
import { api, withQuery } from '../api.ts';
import type { PageContext } from '../context.ts';
import { h, mount } from '../dom.ts';
import type { OAuthAuthorizationResponse, OAuthGrant, OAuthGrantPage, OAuthGrantResponse, OAuthRedirect } from '../types.ts';
import { badge, busy, button, confirmInline, field, loading, notice, pageHeader, table, time } from '../ui.ts';

const tag = (text: string) => h('li', { class: 'tag mono' }, text);

export async function oauthConsentPage(ctx: PageContext): Promise<void> {
  const status = notice('consent-error');
  mount(ctx.root, pageHeader('Connect an MCP client'), status.el, loading());
  const id = ctx.params[0] as string;
  const ask = (await api<OAuthAuthorizationResponse>('GET', `/oauth/authorizations/${id}`)).data;
  if (!ctx.alive()) return;
  const agent = h(
    'select',
    { name: 'agent', required: true, 'data-testid': 'consent-agent' },
    ask.agents.map((a) => h('option', { value: a.id }, `${a.name} (${a.slug})`)),
  );
  const decide = async (btn: HTMLButtonElement, approve: boolean) => {
    status.clear();
    try {
      const body = approve ? { approve, agent_id: (agent as HTMLSelectElement).value } : { approve };
      const answer = await busy(btn, () => api<OAuthRedirect>('POST', `/oauth/authorizations/${id}`, body));
      // back to the client, with its code (or the refusal)
      location.assign(answer.data.redirect_to);
    } catch (err) {
      status.error(err);
    }
  };
  const allow: HTMLButtonElement = button('Allow', () => void decide(allow, true), {
    class: 'btn btn-primary',
    'data-testid': 'consent-allow',
    disabled: ask.agents.length === 0 ? true : null,
  });
  const deny: HTMLButtonElement = button('Deny', () => void decide(deny, false), { class: 'btn', 'data-testid': 'consent-deny' });
  mount(
    ctx.root,
    pageHeader('Connect an MCP client'),
    h(
      'div',
      { class: 'card', 'data-testid': 'consent-card' },
      h('p', null, h('strong', { 'data-testid': 'consent-client' }, ask.client_name), ' asks to use Warden’s MCP endpoint'),
      h('p', { class: 'mono', 'data-testid': 'consent-resource' }, ask.resource),
      h('p', { class: 'muted small' }, `It will be sent back to ${ask.redirect_uri}. The name is the client’s own claim.`),
      h('h2', null, 'It will act as'),
      ask.agents.length
        ? field('Agent', agent, 'Every call is decided by this agent’s policies and audited under its name.')
        : h('p', null, 'This workspace has no active agent.'),
      h('h2', null, 'Servers it may reach'),
      ask.servers.length
        ? h('ul', { class: 'tags', 'data-testid': 'consent-servers' }, ask.servers.map(tag))
        : h('p', { class: 'muted' }, 'None enabled yet.'),
      h('h2', null, 'Scopes'),
      h('ul', { class: 'tags', 'data-testid': 'consent-scopes' }, ask.scopes.map(tag)),
      h('p', { class: 'muted small' }, 'mcp: list and call the tools, resources and prompts of these servers, as the agent.'),
      status.el,
      h('div', { class: 'page-actions' }, allow, deny),
    ),
  );
}

export async function oauthGrantsPage(ctx: PageContext): Promise<void> {
  const status = notice('grants-notice');
  const list = h('div', null, loading());
  mount(
    ctx.root,
    pageHeader('Connected clients'),
    h('p', { class: 'muted' }, 'MCP clients given an agent’s identity by OAuth consent.'),
    status.el,
    list,
  );
  let rows: OAuthGrant[] = [];

  const revokeCell = (g: OAuthGrant): HTMLElement => {
    const slot = h('div', { class: 'row-actions' });
    const idle = () =>
      g.revoked_at
        ? mount(slot, h('span', { class: 'muted' }, '—'))
        : mount(
            slot,
            button('Revoke…', () => ask(), { class: 'btn btn-danger btn-small', 'data-testid': 'grant-revoke' }),
          );
    const ask = () =>
      confirmInline(slot, {
        text: `Revoke “${g.client_name}” acting as ${g.agent}? Its tokens stop working at once.`,
        yes: 'Yes, revoke',
        testid: 'grant-revoke',
        onCancel: idle,
        onYes: async (btn) => {
          try {
            const revoked = (await busy(btn, () => api<OAuthGrantResponse>('DELETE', `/oauth-grants/${g.id}`))).data;
            if (!ctx.alive()) return;
            status.ok(`“${revoked.client_name}” revoked.`);
            await load();
          } catch (err) {
            status.error(err);
            idle();
          }
        },
      });
    idle();
    return slot;
  };

  const load = async () => {
    const page = await api<OAuthGrantPage>('GET', withQuery('/oauth-grants', { limit: 100 }));
    if (!ctx.alive()) return;
    rows = page.data;
    mount(
      list,
      table<OAuthGrant>(
        'OAuth grants, newest first',
        [
          {
            header: 'Client',
            // the name, and what tells two clients of one name apart: the id and when it registered
            cell: (g) =>
              h(
                'div',
                null,
                h('strong', { 'data-testid': 'grant-client' }, g.client_name),
                h('div', { class: 'muted mono small', 'data-testid': 'grant-client-id' }, g.client_id),
                g.client_registered_at ? h('div', { class: 'muted small' }, 'registered ', time(g.client_registered_at)) : null,
              ),
          },
          { header: 'Agent', cell: (g) => h('span', { class: 'mono', 'data-testid': 'grant-agent' }, g.agent) },
          { header: 'Endpoint', cell: (g) => h('span', { class: 'mono' }, new URL(g.resource).pathname) },
          { header: 'Scopes', cell: (g) => h('ul', { class: 'tags' }, g.scopes.map(tag)) },
          { header: 'Granted', cell: (g) => time(g.created_at) },
          {
            header: 'Status',
            cell: (g) => (g.revoked_at ? badge('Revoked', 'bad', 'grant-status') : badge('Active', 'good', 'grant-status')),
          },
          { header: 'Actions', cell: revokeCell },
        ],
        rows,
        { testid: 'grants-table', rowTestid: 'grant-row', rowId: (g) => g.id, empty: 'No client has been connected by OAuth.' },
      ),
    );
  };
  await load();
}
