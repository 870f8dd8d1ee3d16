/** The what-if replay's counts (simulate.ts): one comparison of two results per recorded decision, changes grouped by rule. */
import type { PolicySimulation } from '@warden/contract';
import { iso } from '../../db/paginate.ts';
import type { RecordedDecision } from './simulate.repository.ts';

type Result = RecordedDecision['recorded'];
type Group = PolicySimulation['groups'][number];
type Counts = PolicySimulation['from'];

const DECISIONS_PER_GROUP = 100;
const MAX_GROUPS = 1000;
const RESULT_INDEX: Record<Result, 0 | 1 | 2> = { allowed: 0, blocked: 1, approval_required: 2 };

/**
 * What a policy set decides (the deciding policy and rule, or none) and the groups of its
 * changed decisions, by earlier result: one per outcome, shared by every act it decides.
 */
export interface Outcome {
  now: Result;
  policy: string | null;
  rule: string | null;
  groups: [Group | null, Group | null, Group | null];
}
/**
 * One comparison of two results per decision — `from` (earlier) and `to` (later) — with the
 * changed decisions grouped by the later set's deciding rule and by from → to.
 */
export class Tally {
  readonly from: Counts = { allowed: 0, blocked: 0, approval_required: 0 };
  readonly to: Counts = { allowed: 0, blocked: 0, approval_required: 0 };
  changed = 0;
  failed = 0;
  /** Outcomes of the later set by deciding policy, rule and result (Map keys may be null). */
  private readonly outcomes = new Map<string | null, Map<string | null, [Outcome | null, Outcome | null, Outcome | null]>>();
  /** In the order they were first met, newest decision first, as the answer lists them before sorting by count. */
  private readonly groups: Group[] = [];

  outcomeOf(policy: string | null, rule: string | null, now: Result): Outcome {
    let byRule = this.outcomes.get(policy);
    if (byRule === undefined) {
      byRule = new Map();
      this.outcomes.set(policy, byRule);
    }
    let byResult = byRule.get(rule);
    if (byResult === undefined) {
      byResult = [null, null, null];
      byRule.set(rule, byResult);
    }
    const index = RESULT_INDEX[now];
    let outcome = byResult[index];
    if (outcome === null) {
      outcome = { now, policy, rule, groups: [null, null, null] };
      byResult[index] = outcome;
    }
    return outcome;
  }

  count(row: RecordedDecision, from: Result, outcome: Outcome, failed: boolean): void {
    this.from[from]++;
    this.to[outcome.now]++;
    if (failed) this.failed++;
    if (outcome.now === from) return;
    this.changed++;
    const index = RESULT_INDEX[from];
    let group = outcome.groups[index];
    if (group === null) {
      group = { policy: outcome.policy, rule: outcome.rule, from, to: outcome.now, count: 0, decisions: [] };
      outcome.groups[index] = group;
      this.groups.push(group);
    }
    group.count++;
    if (group.decisions.length < DECISIONS_PER_GROUP) {
      group.decisions.push({
        event_id: row.id,
        event_timestamp: iso(row.at),
        agent: row.agent,
        action: row.action,
        resource: row.resource,
        from,
        to: outcome.now,
      });
    }
  }

  result() {
    return {
      changed: this.changed,
      failed: this.failed,
      from: this.from,
      to: this.to,
      groups: [...this.groups].sort((a, b) => b.count - a.count).slice(0, MAX_GROUPS),
    };
  }
}
