/** Audit log: filters, cursor pagination and the hash chain's verification status. */
import { API_BASE, api, withQuery } from '../api.ts';
import type { PageContext } from '../context.ts';
import { type Child, h, mount } from '../dom.ts';
import type { AuditEvent, AuditEventPage, AuditResult, AuditVerification, Severity } from '../types.ts';
import { badge, busy, button, dash, field, loading, notice, pageHeader, severity, type Tone, table, time } from '../ui.ts';

const RESULTS: [AuditResult, string, Tone][] = [
  ['allowed', 'Allowed', 'good'],
  ['blocked', 'Blocked', 'bad'],
  ['approval_required', 'Approval required', 'warn'],
];
const SEVERITIES: Severity[] = ['info', 'low', 'medium', 'high', 'critical'];

function select(name: string, testid: string, options: [string, string][]): HTMLSelectElement {
  return h(
    'select',
    { name, 'data-testid': testid },
    h('option', { value: '' }, 'Any'),
    options.map(([value, label]) => h('option', { value }, label)),
  );
}

const json = (value: unknown, testid: string) => h('pre', { class: 'json mono', 'data-testid': testid }, JSON.stringify(value, null, 2));
const isObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);

/** What an act ran (or would have): method and URL, or MCP server and tool, prompt or resource; secrets are redacted by the server. */
function target(run: Record<string, unknown>): string {
  if (run.mode === 'http_proxy') return `${String(run.method)} ${String(run.url)}`;
  const named = run.tool ?? run.prompt ?? run.uri;
  return `${String(run.server)} \u2192 ${named === null || named === undefined ? String(run.method ?? '(discovery)') : String(named)}`;
}

function execution(run: Record<string, unknown>): HTMLElement {
  const text = target(run);
  const digest = run.body_sha256 ?? run.arguments_sha256;
  return h(
    'div',
    { 'data-testid': 'audit-execution' },
    h('span', { class: 'mono' }, text),
    digest
      ? h('div', { class: 'muted small mono', title: 'SHA-256 of the body or arguments as sent' }, `sha256 ${String(digest).slice(0, 16)}…`)
      : null,
    // an MCP call's arguments, opened on demand; over the audit's bound only their size is kept
    run.arguments !== undefined
      ? h(
          'details',
          { class: 'audit-arguments', 'data-testid': 'audit-arguments' },
          h('summary', null, 'Arguments (secrets redacted)'),
          json(run.arguments, 'audit-arguments-json'),
        )
      : typeof run.arguments_bytes === 'number'
        ? h('div', { class: 'muted small' }, `Arguments: ${run.arguments_bytes.toLocaleString('en')} bytes, kept by their hash only`)
        : null,
  );
}

/**
 * A row's details: the declared context (e.g. the amount), what ran, the deciding rule and the
 * outcome. Values under secret-looking names arrive redacted from the server.
 */
function details(e: AuditEvent): Child {
  const c = e.context;
  const declared = isObject(c.input) ? c.input : null;
  const known = new Set(['rule', 'input', 'monitored', 'execution', 'outcome', 'duration_ms', 'decision_event_id']);
  const rest = Object.fromEntries(Object.entries(c).filter(([k]) => !known.has(k)));
  const items: [string, Child][] = [];
  if (declared && Object.keys(declared).length) items.push(['Context', json(declared, 'audit-context')]);
  else if (Object.keys(rest).length) items.push([e.source === 'configuration' ? 'Change' : 'Context', json(rest, 'audit-context')]);
  if (isObject(c.execution)) items.push([c.outcome === undefined ? 'Execution' : 'Ran', execution(c.execution)]);
  if (typeof c.rule === 'string') items.push(['Rule', h('span', { class: 'mono' }, c.rule)]);
  if (c.outcome !== undefined) items.push(['Outcome', json(c.outcome, 'audit-outcome')]);
  if (typeof c.duration_ms === 'number') items.push(['Took', `${c.duration_ms} ms`]);
  if (isObject(c.monitored) || Array.isArray(c.monitored)) items.push(['Monitor policies', json(c.monitored, 'audit-monitored')]);
  if (e.approval_id) items.push(['Approval', h('span', { class: 'mono' }, e.approval_id)]);
  if (items.length === 0) return h('span', { class: 'muted' }, '—');
  return h(
    'details',
    { class: 'audit-details', 'data-testid': 'audit-details' },
    h('summary', null, declared && typeof declared.amount !== 'undefined' ? `Details (amount ${String(declared.amount)})` : 'Details'),
    h(
      'dl',
      { class: 'facts' },
      items.map(([k, v]) => [h('dt', null, k), h('dd', null, v)]),
    ),
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
      const page = await api<AuditEventPage>('GET', withQuery('/audit-logs', { limit: 25, cursor: cursors[pageIndex], ...filterQuery() }));
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
                return h('div', { class: 'stack' }, badge(r ? r[1] : e.result, r ? r[2] : 'neutral', 'audit-result'), severity(e.severity));
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
    field('Result', result),
    field('Severity', severityFilter),
    h(
      'div',
      { class: 'row filter-buttons' },
      h('button', { type: 'submit', class: 'btn btn-primary', 'data-testid': 'audit-apply' }, 'Apply filters'),
      button(
        'Clear',
        () => {
          for (const input of [search, from, to, agent, action]) input.value = '';
          result.value = '';
          severityFilter.value = '';
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
