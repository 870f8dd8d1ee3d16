/**
 * "What if?": replays the workspace's recent decisions with the policy being edited replaced by
 * its draft (the other policies as they are) and shows which decisions the draft would change
 * against today's policies, grouped by the rule that decides them; drift (recorded decisions
 * today's policies already decide otherwise) is shown apart, never as the draft's. Nothing is saved.
 */
import { ApiError, api, withQuery } from '../api.ts';
import type { PageContext } from '../context.ts';
import { type Child, h, mount } from '../dom.ts';
import type { Policy, PolicyCreate, PolicyPage, PolicySimulationRequest, PolicySimulationResponse } from '../types.ts';
import { badge, busy, button, dash, notice, type Tone, time } from '../ui.ts';

const RESULT: Record<string, [string, Tone]> = {
  allowed: ['Allowed', 'good'],
  blocked: ['Blocked', 'bad'],
  approval_required: ['Approval required', 'warn'],
};
const result = (r: string, testid?: string) => badge(RESULT[r]?.[0] ?? r, RESULT[r]?.[1] ?? 'neutral', testid);
const LIMITS = [1_000, 10_000, 100_000];

const asDraft = (p: Policy): PolicyCreate => ({
  name: p.name,
  enabled: p.enabled,
  mode: p.mode,
  priority: p.priority,
  rules: p.rules,
  ...(p.description ? { description: p.description } : {}),
});

async function currentPolicies(): Promise<Policy[]> {
  const all: Policy[] = [];
  let cursor: string | null = null;
  // Bounded: a workspace has at most 1,000 rules, so far fewer than 100 pages of policies.
  for (let page = 0; page < 100; page++) {
    const res: PolicyPage = await api<PolicyPage>('GET', withQuery('/policies', { limit: 100, cursor }));
    all.push(...res.data);
    if (!res.has_more || !res.next_cursor) break;
    cursor = res.next_cursor;
  }
  return all;
}

export function whatIfPanel(
  ctx: PageContext,
  opts: {
    draft: () => PolicyCreate;
    policyId: () => string | null;
    slot: HTMLElement;
    /** Called as a replay starts: the editor clears the errors of an earlier save or replay. */
    onStart: () => void;
    onDraftError: (err: ApiError) => void;
  },
): Child {
  const canReplay = ctx.session.permissions.includes('audit:read') && ctx.session.permissions.includes('policies:read');
  const limit = h(
    'select',
    { 'data-testid': 'what-if-limit', 'aria-label': 'Decisions to replay' },
    LIMITS.map((n) => h('option', { value: String(n) }, `last ${n.toLocaleString('en')} decisions`)),
  );
  const status = notice('what-if-notice');
  const run: HTMLButtonElement = button(
    'What if?',
    async () => {
      status.clear();
      opts.onStart();
      mount(opts.slot, status.el);
      try {
        const answer = await busy(run, async () => {
          const draft = opts.draft();
          const id = opts.policyId();
          const others = (await currentPolicies()).filter((p) => p.id !== id).map(asDraft);
          const policies = [...others, draft];
          const body: PolicySimulationRequest = { policies, limit: Number(limit.value) };
          return { index: policies.length - 1, sim: (await api<PolicySimulationResponse>('POST', '/policies/simulate', body)).data };
        });
        if (!ctx.alive()) return;
        mount(opts.slot, report(answer.sim));
      } catch (err) {
        if (!ctx.alive()) return;
        // An error in the draft itself ("policies[<draft>]: rules[…]…") is shown in the editor.
        const mine = err instanceof ApiError ? /^policies\[(\d+)\]: ([\s\S]*)$/.exec(err.message) : null;
        const others = mine ? null : err;
        if (mine && err instanceof ApiError) {
          opts.onDraftError(new ApiError(err.status, err.code, mine[2] ?? err.message));
          status.error(new ApiError(err.status, err.code, `The draft cannot be replayed: ${mine[2]}`));
        } else status.error(others);
        mount(opts.slot, status.el);
      }
    },
    {
      'data-testid': 'policy-what-if',
      disabled: !canReplay,
      title: canReplay ? 'Replay recent decisions with this draft, without saving' : 'Needs audit:read and policies:read',
    },
  );
  return h('span', { class: 'row nowrap what-if-controls' }, run, limit);
}

type Simulation = PolicySimulationResponse['data'];
type Group = Simulation['groups'][number];
type Counts = Simulation['from'];

const counts = (c: Counts) =>
  h(
    'div',
    { class: 'stack' },
    ['allowed', 'blocked', 'approval_required'].map((r) => h('span', null, result(r), ` ${c[r as keyof Counts]}`)),
  );

/** Changed decisions grouped by rule; `kind` names the list for tests ("what-if" or "what-if-drift"). */
function groupList(groups: Group[], kind: string, none: string): Child {
  if (groups.length === 0) return h('p', { class: 'empty', 'data-testid': `${kind}-none` }, none);
  return groups.map((g) =>
    h(
      'details',
      { class: 'what-if-group', 'data-testid': `${kind}-group`, 'data-rule': g.rule ?? '', 'data-from': g.from, 'data-to': g.to },
      h(
        'summary',
        null,
        result(g.from),
        ' → ',
        result(g.to),
        h('strong', { 'data-testid': `${kind}-group-count` }, ` ${g.count}`),
        g.policy
          ? [' by ', h('span', { class: 'mono' }, g.policy), g.rule ? [' · rule ', h('span', { class: 'mono' }, g.rule)] : '']
          : ' by the default decision',
      ),
      h(
        'table',
        { class: 'compact' },
        h(
          'thead',
          null,
          h(
            'tr',
            null,
            ['Time', 'Agent', 'Action', 'Resource'].map((t) => h('th', { scope: 'col' }, t)),
          ),
        ),
        h(
          'tbody',
          null,
          g.decisions.map((d) =>
            h(
              'tr',
              { 'data-testid': `${kind}-decision` },
              h('td', null, time(d.event_timestamp)),
              h('td', null, dash(d.agent)),
              h('td', { class: 'mono' }, d.action),
              h('td', { class: 'mono' }, dash(d.resource)),
            ),
          ),
        ),
      ),
      g.count > g.decisions.length ? h('p', { class: 'muted small' }, `The first ${g.decisions.length} of ${g.count}.`) : null,
    ),
  );
}

function report(sim: Simulation): HTMLElement {
  const drift = sim.drift;
  return h(
    'section',
    { class: 'card what-if', 'data-testid': 'what-if-result', 'aria-labelledby': 'what-if-title' },
    h('h2', { id: 'what-if-title' }, 'What if this draft were saved?'),
    h(
      'p',
      { 'data-testid': 'what-if-summary', 'data-changed': String(sim.changed), 'data-replayed': String(sim.replayed) },
      h('strong', null, `${sim.changed.toLocaleString('en')} of ${sim.replayed.toLocaleString('en')}`),
      ` recent decisions would be decided otherwise by the draft than by today's policies (replayed in ${sim.duration_ms} ms).`,
      sim.approximate ? ` ${sim.approximate} had a body or arguments the audit keeps only as a hash, so their replay is approximate.` : '',
      sim.failed ? ` ${sim.failed} failed to replay (a condition error) and count as blocked.` : '',
    ),
    h(
      'div',
      { class: 'grid-2' },
      h('div', null, h('h3', null, "Today's policies"), counts(sim.from)),
      h('div', null, h('h3', null, 'With the draft'), counts(sim.to)),
    ),
    groupList(sim.groups, 'what-if', 'The draft changes no decision.'),
    h(
      'details',
      { class: 'what-if-drift', 'data-testid': 'what-if-drift', 'data-changed': String(drift.changed), open: drift.changed > 0 },
      h(
        'summary',
        null,
        h('strong', null, `Drift: ${drift.changed.toLocaleString('en')}`),
        " recorded decisions are already decided otherwise by today's policies, without the draft",
      ),
      h(
        'p',
        { class: 'muted small' },
        "Drift is what changed since these decisions were recorded: policies edited, disabled or deleted since, the default decisions, agents. It is not the draft's doing.",
        drift.failed ? ` ${drift.failed} failed to replay on today's policies and count as blocked.` : '',
      ),
      h(
        'div',
        { class: 'grid-2' },
        h('div', null, h('h4', null, 'Recorded'), counts(drift.from)),
        h('div', null, h('h4', null, "Today's policies"), counts(drift.to)),
      ),
      groupList(drift.groups, 'what-if-drift', "No drift: today's policies decide every replayed decision as recorded."),
    ),
  );
}
