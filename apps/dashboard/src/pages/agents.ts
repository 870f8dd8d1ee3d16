/** Agents: the registry (status, environment, risk level, whether a key is registered); suspend and reactivate. */
import { api, withQuery } from '../api.ts';
import type { PageContext } from '../context.ts';
import { h, mount } from '../dom.ts';
import type { Agent, AgentPage, AgentResponse, AgentStatusChange } from '../types.ts';
import { badge, busy, button, cap, confirmInline, dash, loading, notice, pageHeader, type Tone, table, time } from '../ui.ts';

const STATUS_TONE: Record<Agent['status'], Tone> = { active: 'good', inactive: 'neutral', suspended: 'warn', retired: 'neutral' };
const RISK_TONE: Record<NonNullable<Agent['risk_level']>, Tone> = { low: 'good', medium: 'info', high: 'warn', critical: 'bad' };

export async function agentsPage(ctx: PageContext): Promise<void> {
  const status = notice('agents-notice');
  const list = h('div', null, loading());
  const pager = h('div', { class: 'pager' });
  const filter = h(
    'select',
    { name: 'status', 'data-testid': 'agents-filter-status', id: 'agents-status' },
    h('option', { value: '' }, 'Any status'),
    (['active', 'inactive', 'suspended', 'retired'] as const).map((s) => h('option', { value: s }, cap(s))),
  );
  let rows: Agent[] = [];
  let cursor: string | null = null;
  const canWrite = ctx.session.permissions.includes('agents:write');

  const setStatus = async (btn: HTMLButtonElement, agent: Agent, next: AgentStatusChange['status']) => {
    status.clear();
    try {
      const body: AgentStatusChange = { status: next };
      const changed = (await busy(btn, () => api<AgentResponse>('PATCH', `/agents/${agent.id}`, body))).data;
      if (!ctx.alive()) return;
      rows = rows.map((a) => (a.id === changed.id ? changed : a));
      status.ok(
        next === 'suspended'
          ? `“${changed.name}” is suspended: Warden refuses its runtime calls (agent_inactive) from the next request on.`
          : `“${changed.name}” is active again.`,
      );
      render();
    } catch (err) {
      status.error(err);
    }
  };

  const actions = (agent: Agent): HTMLElement => {
    const slot = h('div', { class: 'row-actions' });
    const idle = () => {
      if (!canWrite) return mount(slot, h('span', { class: 'muted small' }, 'needs agents:write'));
      if (agent.status === 'active') {
        mount(
          slot,
          button('Suspend…', () => ask(), {
            class: 'btn btn-small btn-danger',
            'data-testid': 'agent-suspend',
            'aria-label': `Suspend ${agent.name}`,
          }),
        );
      } else {
        const reactivate: HTMLButtonElement = button('Reactivate', () => void setStatus(reactivate, agent, 'active'), {
          class: 'btn btn-small',
          'data-testid': 'agent-reactivate',
          'aria-label': `Reactivate ${agent.name}`,
        });
        mount(slot, reactivate);
      }
    };
    const ask = () =>
      confirmInline(slot, {
        text: `Suspend “${agent.name}”? Its runtime calls are refused until it is reactivated.`,
        yes: 'Yes, suspend',
        testid: 'agent-suspend',
        onCancel: idle,
        onYes: (btn) => setStatus(btn, agent, 'suspended'),
      });
    idle();
    return slot;
  };

  const render = () =>
    mount(
      list,
      table(
        'Agents',
        [
          { header: 'Agent', cell: (a) => h('div', null, h('strong', null, a.name), h('div', { class: 'muted mono small' }, a.slug)) },
          { header: 'Status', cell: (a) => badge(cap(a.status), STATUS_TONE[a.status] ?? 'neutral', 'agent-status') },
          { header: 'Environment', cell: (a) => h('span', { 'data-testid': 'agent-environment' }, cap(a.environment)) },
          {
            header: 'Risk level',
            cell: (a) =>
              a.risk_level ? badge(cap(a.risk_level), RISK_TONE[a.risk_level], 'agent-risk') : badge('Not rated', 'warn', 'agent-risk'),
          },
          { header: 'Agent key', cell: (a) => h('span', { 'data-testid': 'agent-key' }, a.api_key_hint ?? (a.has_api_key ? 'Yes' : 'No')) },
          { header: 'Provider / model', cell: (a) => [a.provider, a.model ? ` · ${a.model}` : ''] },
          { header: 'Description', cell: (a) => dash(a.description) },
          { header: 'Updated', cell: (a) => time(a.updated_at) },
          { header: 'Actions', cell: actions },
        ],
        rows,
        { testid: 'agents-table', rowTestid: 'agent-row', rowId: (a) => a.id, empty: 'No agents registered.' },
      ),
    );

  const load = async (append: boolean) => {
    status.clear();
    try {
      const page = await api<AgentPage>('GET', withQuery('/agents', { limit: 50, status: filter.value, cursor: append ? cursor : null }));
      if (!ctx.alive()) return;
      rows = append ? [...rows, ...page.data] : page.data;
      cursor = page.has_more ? page.next_cursor : null;
      render();
      mount(pager, cursor ? button('Load more agents', () => void load(true), { 'data-testid': 'agents-more' }) : null);
    } catch (err) {
      if (ctx.alive()) status.error(err);
    }
  };
  filter.addEventListener('change', () => void load(false));
  mount(
    ctx.root,
    pageHeader(
      'Agents',
      h('label', { for: 'agents-status', class: 'inline-label' }, 'Status'),
      filter,
      button('Refresh', () => void load(false), { 'data-testid': 'agents-refresh' }),
    ),
    status.el,
    list,
    pager,
  );
  await load(false);
}
