/**
 * Overview: charts drawn as inline SVG from GET /insights (aggregated by the database):
 * decisions over time by result, the most blocked actions and agents, approvals waiting and
 * their age. Each chart has its figures as a table too, for screen readers and exact numbers.
 */
import { api, withQuery } from '../api.ts';
import type { PageContext } from '../context.ts';
import { type Child, h, mount, uid } from '../dom.ts';
import type { Insights } from '../types.ts';
import { button, loading, notice, pageHeader, stat } from '../ui.ts';

const SVG_NS = 'http://www.w3.org/2000/svg';

/** An SVG element; attributes only (CSP forbids inline style), colours come from classes in app.css. */
function svg(tag: string, attrs: Record<string, string | number>, ...children: (SVGElement | string)[]): SVGElement {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs)) el.setAttribute(name, String(value));
  for (const child of children) el.append(typeof child === 'string' ? document.createTextNode(child) : child);
  return el;
}

const SERIES = [
  ['allowed', 'Allowed'],
  ['approval_required', 'Approval required'],
  ['blocked', 'Blocked'],
] as const;

type Bucket = Insights['data']['decisions'][number];

const label = (iso: string, unit: 'hour' | 'day') => {
  const d = new Date(iso);
  return unit === 'hour'
    ? d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' })
    : d.toLocaleDateString([], { month: 'short', day: 'numeric' });
};

/** A round upper bound for the axis: 1, 2, 5 × 10^n. */
function niceMax(value: number): number {
  if (value <= 0) return 1;
  const p = 10 ** Math.floor(Math.log10(value));
  return ([1, 2, 5, 10].find((m) => m * p >= value) ?? 10) * p;
}

function decisionsChart(data: Insights['data']): HTMLElement {
  const buckets = data.decisions;
  const W = 720;
  const H = 240;
  const left = 44;
  const bottom = 28;
  const top = 10;
  const plotW = W - left - 8;
  const plotH = H - top - bottom;
  const max = niceMax(Math.max(0, ...buckets.map((b) => b.allowed + b.blocked + b.approval_required)));
  const slot = plotW / Math.max(1, buckets.length);
  const barW = Math.max(2, slot * 0.7);
  const y = (v: number) => top + plotH - (v / max) * plotH;
  const titleId = uid('chart-title');
  const chart = svg(
    'svg',
    { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-labelledby': titleId, class: 'chart', 'data-testid': 'chart-decisions' },
    svg('title', { id: titleId }, `Decisions per ${data.bucket} by result`),
  );
  for (const tick of [0, max / 2, max]) {
    chart.append(
      svg('line', { x1: left, x2: W - 8, y1: y(tick), y2: y(tick), class: 'grid' }),
      svg('text', { x: left - 6, y: y(tick) + 4, class: 'axis', 'text-anchor': 'end' }, String(tick)),
    );
  }
  buckets.forEach((b, i) => {
    let base = 0;
    const x = left + i * slot + (slot - barW) / 2;
    for (const [key, name] of SERIES) {
      const v = b[key];
      if (v > 0) {
        chart.append(
          svg(
            'rect',
            {
              x,
              y: y(base + v),
              width: barW,
              height: Math.max(1, y(base) - y(base + v)),
              class: `bar bar-${key}`,
              'data-testid': `bar-${key}`,
            },
            svg('title', {}, `${label(b.start, data.bucket)}: ${v} ${name.toLowerCase()}`),
          ),
        );
      }
      base += v;
    }
  });
  const every = Math.max(1, Math.ceil(buckets.length / 8));
  buckets.forEach((b, i) => {
    if (i % every === 0)
      chart.append(
        svg('text', { x: left + i * slot + slot / 2, y: H - 8, class: 'axis', 'text-anchor': 'middle' }, label(b.start, data.bucket)),
      );
  });
  const totals = Object.fromEntries(SERIES.map(([k]) => [k, buckets.reduce((n, b) => n + b[k], 0)])) as Record<
    (typeof SERIES)[number][0],
    number
  >;
  return h(
    'section',
    { class: 'card chart-card', 'aria-labelledby': `${titleId}-h` },
    h('h2', { id: `${titleId}-h` }, 'Decisions over time'),
    h(
      'ul',
      { class: 'legend' },
      SERIES.map(([k, name]) =>
        h(
          'li',
          null,
          h('span', { class: `swatch swatch-${k}`, 'aria-hidden': 'true' }),
          `${name}: `,
          h('strong', { 'data-testid': `total-${k}` }, String(totals[k])),
        ),
      ),
    ),
    chart,
    figures(
      'Decisions per bucket',
      ['Start', 'Allowed', 'Approval required', 'Blocked'],
      buckets.map((b: Bucket) => [label(b.start, data.bucket), b.allowed, b.approval_required, b.blocked]),
    ),
  );
}

/** Horizontal bars for a top-ten list. */
function topChart(title: string, rows: { name: string; count: number }[], testid: string, empty: string): HTMLElement {
  const titleId = uid('top');
  const max = Math.max(1, ...rows.map((r) => r.count));
  const rowH = 26;
  const W = 360;
  const nameW = 150;
  const chart = svg(
    'svg',
    {
      viewBox: `0 0 ${W} ${Math.max(1, rows.length) * rowH}`,
      role: 'img',
      'aria-labelledby': titleId,
      class: 'chart chart-small',
      'data-testid': testid,
    },
    svg('title', { id: titleId }, title),
  );
  rows.forEach((r, i) => {
    const w = ((W - nameW - 40) * r.count) / max;
    chart.append(
      svg(
        'text',
        { x: nameW - 6, y: i * rowH + 17, class: 'axis name', 'text-anchor': 'end' },
        r.name.length > 22 ? `${r.name.slice(0, 21)}…` : r.name,
      ),
      svg(
        'rect',
        { x: nameW, y: i * rowH + 5, width: Math.max(2, w), height: rowH - 10, class: 'bar bar-blocked' },
        svg('title', {}, `${r.name}: ${r.count}`),
      ),
      svg('text', { x: nameW + w + 6, y: i * rowH + 17, class: 'axis' }, String(r.count)),
    );
  });
  return h(
    'section',
    { class: 'card chart-card', 'aria-label': title },
    h('h2', null, title),
    rows.length ? chart : h('p', { class: 'empty', 'data-testid': `${testid}-empty` }, empty),
    rows.length
      ? figures(
          title,
          ['Name', 'Blocked'],
          rows.map((r) => [r.name, r.count]),
          `${testid}-table`,
        )
      : null,
  );
}

function waitingCard(w: Insights['data']['approvals_waiting']): HTMLElement {
  const age = w.oldest_created_at ? Date.now() - new Date(w.oldest_created_at).getTime() : 0;
  const words =
    age >= 86_400_000
      ? `${Math.floor(age / 86_400_000)} d`
      : age >= 3_600_000
        ? `${Math.floor(age / 3_600_000)} h`
        : `${Math.max(0, Math.floor(age / 60_000))} min`;
  const rows = [
    ['under an hour', w.under_1h],
    ['1 to 24 hours', w.from_1h_to_24h],
    ['over 24 hours', w.over_24h],
  ] as const;
  const max = Math.max(1, ...rows.map(([, n]) => n));
  const titleId = uid('waiting');
  const chart = svg(
    'svg',
    { viewBox: '0 0 360 84', role: 'img', 'aria-labelledby': titleId, class: 'chart chart-small', 'data-testid': 'chart-waiting' },
    svg('title', { id: titleId }, 'Approvals waiting, by how long they have waited'),
  );
  rows.forEach(([name, n], i) => {
    const w2 = (200 * n) / max;
    chart.append(
      svg('text', { x: 104, y: i * 28 + 18, class: 'axis', 'text-anchor': 'end' }, name),
      svg('rect', {
        x: 110,
        y: i * 28 + 6,
        width: Math.max(2, w2),
        height: 16,
        class: `bar ${i === 2 ? 'bar-blocked' : i === 1 ? 'bar-approval_required' : 'bar-allowed'}`,
      }),
      svg('text', { x: 116 + w2, y: i * 28 + 18, class: 'axis' }, String(n)),
    );
  });
  return h(
    'section',
    { class: 'card chart-card', 'aria-label': 'Approvals waiting' },
    h('h2', null, 'Approvals waiting'),
    h(
      'div',
      { class: 'stats' },
      stat('Waiting', String(w.count), 'waiting-count'),
      stat('Oldest waiting', w.count ? words : '—', 'waiting-oldest', w.count ? 'since it was requested' : undefined),
    ),
    chart,
    w.count ? h('p', null, h('a', { href: '#/approvals' }, 'Decide them on the Approvals page →')) : null,
  );
}

/** The figures behind a chart, as a table in a disclosure. */
function figures(caption: string, headers: string[], rows: (string | number)[][], testid?: string): HTMLElement {
  return h(
    'details',
    { class: 'figures' },
    h('summary', null, 'Show the figures'),
    h(
      'table',
      { class: 'compact', 'data-testid': testid },
      h('caption', { class: 'visually-hidden' }, caption),
      h(
        'thead',
        null,
        h(
          'tr',
          null,
          headers.map((t) => h('th', { scope: 'col' }, t)),
        ),
      ),
      h(
        'tbody',
        null,
        rows.map((r) =>
          h(
            'tr',
            null,
            r.map((c) => h('td', null, String(c))),
          ),
        ),
      ),
    ),
  );
}

export async function overviewPage(ctx: PageContext): Promise<void> {
  const status = notice('overview-notice');
  const body = h('div', { class: 'charts' }, loading());
  const range = h(
    'select',
    { id: 'overview-days', 'data-testid': 'overview-days' },
    h('option', { value: '1' }, 'Last 24 hours'),
    h('option', { value: '7', selected: true }, 'Last 7 days'),
    h('option', { value: '31' }, 'Last 31 days'),
  );
  const load = async () => {
    status.clear();
    try {
      const data = (await api<Insights>('GET', withQuery('/insights', { days: range.value }))).data;
      if (!ctx.alive()) return;
      const parts: Child[] = [
        decisionsChart(data),
        h(
          'div',
          { class: 'grid-2' },
          topChart('Most blocked actions', data.top_blocked_actions, 'chart-blocked-actions', 'Nothing was blocked in this window.'),
          topChart('Most blocked agents', data.top_blocked_agents, 'chart-blocked-agents', 'No agent was blocked in this window.'),
        ),
        waitingCard(data.approvals_waiting),
      ];
      mount(body, parts);
    } catch (err) {
      if (ctx.alive()) {
        status.error(err);
        mount(body);
      }
    }
  };
  range.addEventListener('change', () => void load());
  mount(
    ctx.root,
    pageHeader(
      'Overview',
      h('label', { for: 'overview-days', class: 'inline-label' }, 'Window'),
      range,
      button('Refresh', () => void load(), { 'data-testid': 'overview-refresh' }),
    ),
    h('p', { class: 'lead' }, 'Decisions recorded in the audit log (configuration changes excluded), counted by the database.'),
    status.el,
    body,
  );
  await load();
}
