/** One row of the audit table: what an act ran, how it ended (its outcome event, folded in), and its details on demand. */
import type { Child } from '../dom.ts';
import { h } from '../dom.ts';
import type { AuditEvent } from '../types.ts';
import { badge, type Tone } from '../ui.ts';

/** How an act ended (its outcome event's `context.outcome`). */
export const OUTCOMES: [string, string, Tone][] = [
  ['succeeded', 'Succeeded', 'good'],
  ['failed', 'Failed', 'bad'],
  ['target_denied', 'Target denied', 'bad'],
  ['cancelled', 'Cancelled', 'neutral'],
];

/** An act's row (the audit is read as acts): how it ended, from its outcome event; nothing for an event that is no act. */
export function outcomeBadge(e: AuditEvent): Child {
  if (e.outcome_event === undefined) return null;
  // a refused act never runs; an allowed one without an outcome is still running (or its process ended)
  if (e.outcome_event === null)
    return h('span', { class: 'muted small', 'data-testid': 'audit-act-outcome' }, e.result === 'allowed' ? 'no outcome yet' : 'not run');
  const ended = String(e.outcome_event.context.outcome);
  const known = OUTCOMES.find(([v]) => v === ended);
  const took = e.outcome_event.context.duration_ms;
  return h(
    'div',
    { class: 'small' },
    badge(known ? known[1] : ended, known ? known[2] : 'neutral', 'audit-act-outcome'),
    typeof took === 'number' ? h('span', { class: 'muted' }, ` ${took} ms`) : null,
  );
}

const json = (value: unknown, testid: string) => h('pre', { class: 'json mono', 'data-testid': testid }, JSON.stringify(value, null, 2));
export const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/** What an act ran (or would have): method and URL, or MCP server and tool, prompt or resource; secrets are redacted by the server. */
export function target(run: Record<string, unknown>): string {
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
export function details(e: AuditEvent): Child {
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
  const ended = e.outcome_event;
  if (ended) {
    items.push(['Outcome', json(ended.context.outcome, 'audit-outcome')]);
    if (typeof ended.context.duration_ms === 'number') items.push(['Took', `${ended.context.duration_ms} ms`]);
    if (ended.message) items.push(['Outcome message', ended.message]);
    items.push([
      'Outcome event',
      h('span', { class: 'mono small', 'data-testid': 'audit-outcome-event' }, `${ended.id} · seq. ${ended.sequence ?? 'unsealed'}`),
    ]);
  }
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
