/** Agents: the registry, read-only (status, environment, risk level, whether a key is registered). */
import { api, withQuery } from '../api.ts';
import type { PageContext } from '../context.ts';
import { h, mount } from '../dom.ts';
import type { Agent, AgentPage } from '../types.ts';
import { badge, button, cap, dash, loading, notice, pageHeader, type Tone, table, time } from '../ui.ts';

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

  const load = async (append: boolean) => {
    status.clear();
    try {
      const page = await api<AgentPage>('GET', withQuery('/agents', { limit: 50, status: filter.value, cursor: append ? cursor : null }));
      if (!ctx.alive()) return;
      rows = append ? [...rows, ...page.data] : page.data;
      cursor = page.has_more ? page.next_cursor : null;
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
            { header: 'Agent key', cell: (a) => h('span', { 'data-testid': 'agent-key' }, a.has_api_key ? 'Yes' : 'No') },
            { header: 'Provider / model', cell: (a) => [a.provider, a.model ? ` · ${a.model}` : ''] },
            { header: 'Description', cell: (a) => dash(a.description) },
            { header: 'Updated', cell: (a) => time(a.updated_at) },
          ],
          rows,
          { testid: 'agents-table', rowTestid: 'agent-row', rowId: (a) => a.id, empty: 'No agents registered.' },
        ),
      );
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
