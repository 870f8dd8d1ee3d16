/**
 * `warden policies fixtures --from-audit`: test cases (policy-tests.ts) cut from recorded
 * decisions, so that a policy directory starts with what its agents actually did. A case is one
 * distinct act — agent, action, resource, tool, environment, declared context and execution —
 * as the audit log keeps it (secrets already redacted there, and redacted again here), its agent
 * as registered now (a deleted one keeps its slug and environment, as in the what-if replay),
 * expecting what was recorded: its effect (an act an approval let through expected
 * `require_approval`), rule and policy.
 */
import type { Agent, AuditEvent } from '@warden/contract';
import { stableJson } from '../../shared/canonical-json.ts';
import { redactSecrets } from '../../shared/redact.ts';

export interface FixtureCase {
  name: string;
  agent: string;
  input: { action: string; resource?: string; tool?: string; environment: string; context?: Record<string, unknown> };
  execution?: { audited: Record<string, unknown> };
  expect: { effect: 'allow' | 'block' | 'require_approval'; rule: string | null; policy: string | null };
}

/** A test file: no `defaults` of its own, so the cases are decided on the directory's defaults.yaml, and a change to it is tested too. */
export interface FixtureFile {
  agents: Record<string, Record<string, unknown>>;
  cases: FixtureCase[];
}

const EFFECT = { allowed: 'allow', blocked: 'block', approval_required: 'require_approval' } as const;
const DECIDED = new Set(['evaluation', 'execution', 'mcp']);

/** An audit event the replay would decide again: a decision (not an outcome, a change or a `POST /audit` record). */
export function isDecision(event: AuditEvent): boolean {
  return (
    DECIDED.has(event.source) &&
    event.result in EFFECT &&
    event.context.decision_event_id === undefined &&
    // an execution refused before Warden knew what would run is no act a case can state
    (event.source === 'evaluation' || typeof event.context.execution === 'object')
  );
}

/** The agent's attributes as a case states them (what policy conditions and allow-lists read). */
function agentAttributes(agent: Agent): Record<string, unknown> {
  return {
    id: agent.id,
    name: agent.name,
    status: agent.status,
    environment: agent.environment,
    ...(agent.risk_level ? { risk_level: agent.risk_level } : {}),
    ...(agent.provider ? { provider: agent.provider } : {}),
    ...(agent.tags?.length ? { tags: agent.tags } : {}),
    ...(agent.allowed_tools?.length ? { allowed_tools: agent.allowed_tools } : {}),
    ...(agent.allowed_resources?.length ? { allowed_resources: agent.allowed_resources } : {}),
  };
}

/**
 * Test cases cut from decisions fed newest first (`add`), one per distinct act (the newest of
 * those that repeat it), at most `limit`: `add` answers false once the file is full.
 */
export class FixtureCutter {
  readonly file: FixtureFile = { agents: {}, cases: [] };
  private readonly registered: Map<string, Agent>;
  private readonly seen = new Set<string>();

  constructor(
    agents: readonly Agent[],
    private readonly limit: number,
  ) {
    this.registered = new Map(agents.map((agent) => [agent.slug, agent]));
  }

  add(event: AuditEvent): boolean {
    if (this.file.cases.length < this.limit && isDecision(event)) this.cut(event);
    return this.file.cases.length < this.limit;
  }

  private cut(event: AuditEvent): void {
    const slug = event.agent ?? '';
    const agent = this.registered.get(slug);
    const environment = event.environment ?? agent?.environment ?? 'production';
    const context = event.context.input as Record<string, unknown> | undefined;
    const execution = event.context.execution as Record<string, unknown> | undefined;
    const input: FixtureCase['input'] = {
      action: event.action,
      ...(event.resource !== null ? { resource: event.resource } : {}),
      ...(event.tool !== null ? { tool: event.tool } : {}),
      environment,
      ...(context ? { context: redactSecrets(context) as Record<string, unknown> } : {}),
    };
    const key = stableJson({ slug, input, execution });
    if (this.seen.has(key)) return;
    this.seen.add(key);
    // as the replay counts it (simulate.repository.ts): an act an approval let through was one that required it
    const effect = event.result === 'allowed' && event.approval_id ? 'require_approval' : EFFECT[event.result as keyof typeof EFFECT];
    this.file.cases.push({
      name: `${slug || '(no agent)'} ${event.action}${event.resource ? ` ${event.resource}` : ''} (event ${event.id})`,
      agent: agentKeyOf(this.file, slug, environment, agent),
      input,
      ...(execution ? { execution: { audited: redactSecrets(execution) as Record<string, unknown> } } : {}),
      expect: { effect, rule: (event.context.rule as string | undefined) ?? null, policy: event.policy },
    });
  }
}

/** The decisions among `events` (newest first) as a test file: FixtureCutter over them. */
export function fixtureFile(events: Iterable<AuditEvent>, agents: readonly Agent[], limit: number): FixtureFile {
  const cutter = new FixtureCutter(agents, limit);
  for (const event of events) if (!cutter.add(event)) break;
  return cutter.file;
}

/**
 * The key of the case's agent in the file's `agents`: its slug, registered as it is now; a
 * deleted agent by its slug and the environment its decision was made in.
 */
function agentKeyOf(file: FixtureFile, slug: string, environment: string, agent: Agent | undefined): string {
  if (agent && agent.environment === environment) {
    file.agents[slug] ??= agentAttributes(agent);
    return slug;
  }
  const key = `${slug}@${environment}`;
  file.agents[key] ??= { ...(agent ? agentAttributes(agent) : {}), slug, environment };
  return key;
}
