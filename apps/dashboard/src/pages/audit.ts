/** Audit log, read as acts (an act's outcome folded into its decision's row): filters, cursor pagination and the chain's verification status. */
import { API_BASE, api, withQuery } from '../api.ts';
import type { PageContext } from '../context.ts';
import { h, mount } from '../dom.ts';
import type { AuditEvent, AuditEventPage, AuditResult, AuditVerification, Severity } from '../types.ts';
import { badge, busy, button, dash, field, loading, notice, pageHeader, severity, type Tone, table, time } from '../ui.ts';
import { details, isObject, OUTCOMES, outcomeBadge, target } from './audit-row.ts';

const RESULTS: [AuditResult, string, Tone][] = [
  ['allowed', 'Allowed', 'good'],
  ['blocked', 'Blocked', 'bad'],
  ['approval_required', 'Approval required', 'warn'],
];
const SEVERITIES: Severity[] = ['info', 'low', 'medium', 'high', 'critical'];
const SOURCES = ['evaluation', 'execution', 'mcp', 'manual', 'configuration', 'approval'];
function select(name: string, testid: string, options: [string, string][]): HTMLSelectElement {
  return h(
    'select',
    { name, 'data-testid': testid },
    h('option', { value: '' }, 'Any'),
    options.map(([value, label]) => h('option', { value }, label)),
  );
}

export async function auditPage(ctx: PageContext): Promise<void> {
  const status = notice('audit-notice');
  const verifySlot = h('div', { class: 'card verify', 'data-testid': 'audit-verify' }, loading());
  const listSlot = h('div', null, loading());
  const pager = h('div', { class: 'pager' });

  const agent = h('input', {
    type: 'text',
    name: 'agent',
    'data-testid': 'audit-filter-agent',
    autocomplete: 'off',
    placeholder: 'agent slug',
  });
  const action = h('input', {
    type: 'text',
    name: 'action',
    'data-testid': 'audit-filter-action',
    autocomplete: 'off',
    placeholder: 'exact action',
  });
  const search = h('input', {
    type: 'search',
    name: 'q',
    'data-testid': 'audit-filter-search',
    autocomplete: 'off',
    maxlength: '200',
    placeholder: 'agent, action, resource, message…',
  });
  const text = (name: string, placeholder: string) =>
    h('input', { type: 'text', name, 'data-testid': `audit-filter-${name}`, autocomplete: 'off', placeholder });
  const server = text('server', 'MCP server slug');
  const tool = text('tool', 'exact tool');
  const source = select(
    'source',
    'audit-filter-source',
    SOURCES.map((v) => [v, v]),
  );
  const outcome = select(
    'outcome',
    'audit-filter-outcome',
    OUTCOMES.map(([v, l]) => [v, l]),
  );
  const from = h('input', { type: 'datetime-local', name: 'from', 'data-testid': 'audit-filter-from' });
  const to = h('input', { type: 'datetime-local', name: 'to', 'data-testid': 'audit-filter-to' });
  const result = select(
    'result',
    'audit-filter-result',
    RESULTS.map(([v, l]) => [v, l]),
  );
  const severityFilter = select(
    'severity',
    'audit-filter-severity',
    SEVERITIES.map((s) => [s, s]),
  );

  // cursors[i] is the cursor that loads page i (page 0: none).
  let cursors: (string | null)[] = [null];
  let pageIndex = 0;

  const verify = async () => {
    try {
      const v = (await api<AuditVerification>('GET', '/audit/verify')).data;
      if (!ctx.alive()) return;
      mount(
        verifySlot,
        h('h2', null, 'Chain verification'),
        h(
          'p',
          { class: 'verify-line' },
          v.valid
            ? badge('Valid: every sealed event verifies', 'good', 'audit-verify-status')
            : badge(`Broken at sequence ${v.first_invalid_sequence ?? '?'}`, 'bad', 'audit-verify-status'),
        ),
        h(
          'dl',
          { class: 'facts' },
          h('dt', null, 'Checked'),
          h('dd', { 'data-testid': 'audit-verify-checked' }, `${v.checked} sealed events`),
          h('dt', null, 'Unsealed'),
          h('dd', { 'data-testid': 'audit-verify-unsealed' }, `${v.unsealed} not yet sealed`),
          h('dt', null, 'Verified'),
          h('dd', null, time(v.verified_at)),
        ),
        button('Verify again', (e) => void busy(e.currentTarget as HTMLButtonElement, verify), { 'data-testid': 'audit-verify-again' }),
      );
      const el = verifySlot.querySelector('[data-testid="audit-verify-status"]') as HTMLElement;
      el.dataset.valid = String(v.valid);
    } catch (err) {
      if (ctx.alive()) showVerifyError(err);
    }
  };
  const showVerifyError = (err: unknown) => {
    const n = notice('audit-verify-error');
    n.error(err);
    mount(verifySlot, h('h2', null, 'Chain verification'), n.el);
  };

  /** The filters as the API takes them; a datetime-local value is the browser's local time. */
  const filterQuery = () => ({
    q: search.value.trim(),
    agent: agent.value.trim(),
    action: action.value.trim(),
    source: source.value,
    server: server.value.trim(),
    tool: tool.value.trim(),
    outcome: outcome.value,
    result: result.value,
    severity: severityFilter.value,
    from: from.value ? new Date(from.value).toISOString() : '',
    to: to.value ? new Date(to.value).toISOString() : '',
  });
  const exportLinks = h('div', { class: 'row export-links' });
  const renderExportLinks = () =>
    mount(
      exportLinks,
      h('span', { class: 'muted small' }, 'Export these events:'),
      ...(['csv', 'ndjson'] as const).map((format) =>
        h(
          'a',
          {
            class: 'btn btn-small',
            href: `${API_BASE}${withQuery('/audit-logs/export', { format, ...filterQuery() })}`,
            download: '',
            'data-testid': `audit-export-${format}`,
          },
          format === 'csv' ? 'CSV' : 'NDJSON',
        ),
      ),
    );

  const load = async () => {
    status.clear();
    renderExportLinks();
    try {
      // read as acts: an MCP call or a proxied request is one row, its outcome folded in
      const page = await api<AuditEventPage>(
        'GET',
        withQuery('/audit-logs', { limit: 25, cursor: cursors[pageIndex], view: 'acts', ...filterQuery() }),
      );
      if (!ctx.alive()) return;
      cursors = cursors.slice(0, pageIndex + 1);
      if (page.has_more && page.next_cursor) cursors.push(page.next_cursor);
      mount(
        listSlot,
        table<AuditEvent>(
          'Audit events, newest first',
          [
            { header: 'Time', cell: (e) => time(e.event_timestamp) },
            {
              header: 'Seq.',
              cell: (e) => (e.sequence === null ? h('span', { class: 'muted' }, 'unsealed') : String(e.sequence)),
              class: 'num',
            },
            {
              header: 'Decision',
              cell: (e) => {
                const r = RESULTS.find(([v]) => v === e.result);
                return h(
                  'div',
                  { class: 'stack' },
                  badge(r ? r[1] : e.result, r ? r[2] : 'neutral', 'audit-result'),
                  severity(e.severity),
                  outcomeBadge(e),
                );
              },
            },
            { header: 'Agent', cell: (e) => dash(e.agent) },
            {
              header: 'Action / resource',
              cell: (e) =>
                h(
                  'div',
                  null,
                  h('div', { class: 'mono' }, e.action),
                  // what ran, for the acts Warden performed: the MCP server and tool (or the HTTP request)
                  isObject(e.context.execution)
                    ? h('div', { class: 'mono small', 'data-testid': 'audit-target' }, target(e.context.execution))
                    : null,
                  e.resource ? h('div', { class: 'mono muted small' }, e.resource) : null,
                ),
            },
            {
              header: 'Policy / message',
              cell: (e) =>
                h(
                  'div',
                  null,
                  e.policy ? h('div', null, e.policy) : dash(null),
                  e.message ? h('div', { class: 'muted small' }, e.message) : null,
                ),
            },
            { header: 'Source', cell: (e) => h('div', null, e.source, e.user ? h('div', { class: 'muted small mono' }, e.user) : null) },
            { header: 'Details', cell: details },
          ],
          page.data,
          {
            testid: 'audit-table',
            rowTestid: 'audit-row',
            rowId: (e) => e.id,
            empty: 'No audit events match these filters.',
            class: 'audit-table',
          },
        ),
      );
      const prev = button(
        '← Previous page',
        () => {
          pageIndex -= 1;
          void load();
        },
        { 'data-testid': 'audit-prev', disabled: pageIndex === 0 },
      );
      const next = button(
        'Next page →',
        () => {
          pageIndex += 1;
          void load();
        },
        { 'data-testid': 'audit-next', disabled: !(page.has_more && page.next_cursor) },
      );
      const searchNote =
        search.value.trim() && page.has_more && page.data.length < 25
          ? h('span', { class: 'muted small', 'data-testid': 'audit-search-more' }, 'Searched part of the log: the next page searches on.')
          : null;
      mount(pager, prev, h('span', { class: 'muted', 'data-testid': 'audit-page' }, `Page ${pageIndex + 1}`), next, searchNote);
    } catch (err) {
      if (ctx.alive()) status.error(err);
    }
  };

  const filters = h(
    'form',
    {
      class: 'card filters',
      'aria-label': 'Filter audit events',
      onsubmit: (event: Event) => {
        event.preventDefault();
        cursors = [null];
        pageIndex = 0;
        void load();
      },
    },
    field('Search', search),
    field('From', from),
    field('To', to),
    field('Agent', agent),
    field('Action', action),
    field('Source', source),
    field('MCP server', server),
    field('Tool', tool),
    field('Outcome', outcome),
    field('Result', result),
    field('Severity', severityFilter),
    h(
      'div',
      { class: 'row filter-buttons' },
      h('button', { type: 'submit', class: 'btn btn-primary', 'data-testid': 'audit-apply' }, 'Apply filters'),
      button(
        'Clear',
        () => {
          for (const input of [search, from, to, agent, action, server, tool]) input.value = '';
          for (const choice of [result, severityFilter, source, outcome]) choice.value = '';
          cursors = [null];
          pageIndex = 0;
          void load();
        },
        { 'data-testid': 'audit-clear' },
      ),
    ),
  );

  mount(
    ctx.root,
    pageHeader('Audit log'),
    h(
      'p',
      { class: 'lead' },
      'Every decision and execution, recorded before the answer goes out and sealed into a per-workspace hash chain.',
    ),
    verifySlot,
    filters,
    exportLinks,
    status.el,
    listSlot,
    pager,
  );
  await Promise.all([verify(), load()]);
}
