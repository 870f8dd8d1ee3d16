/**
 * The audit history of `npm run bench:scale`: N events that look like a fleet's decisions
 * (sources, agents, actions, results and severities in realistic, skewed proportions; contexts
 * like those decisions.ts writes), written with COPY straight into audit_events and, in the same
 * transaction, into the sealing queue (audit_unsealed), as an event recorded inside a transaction
 * is (audit.repository.ts, INSERT_AUDIT_ROWS). The server's own sealer then seals them and its
 * checkpointer signs the tree: nothing here computes a hash.
 *
 * Events are spread at a fixed rate (BENCH_SCALE_EVENTS_PER_DAY) ending just before the seeding
 * starts, so a larger size is a longer history at the same rate, not a busier day: what the
 * compliance status counts (the last 24 hours) is the same at every size from that rate up.
 */
import type pg from 'pg';
import { timeOrderedUuid } from '../../apps/server/src/shared/ids.ts';
import { copyFrom, copyValue } from './pg-copy.ts';

export interface SeedAgent {
  id: string;
  slug: string;
  environment: string;
}

/** Share of each result among the seeded events (`result=blocked` is the listing filter measured). */
export const RESULT_SHARES = { allowed: 0.6, blocked: 0.25, approval_required: 0.15 } as const;

/** audit_events' columns, in the order the COPY rows list them. */
const EVENT_COLUMNS = [
  'workspace_id',
  'id',
  'event_timestamp',
  'source',
  'agent',
  'agent_id',
  'action',
  'resource',
  'tool',
  'environment',
  'user_name',
  'policy',
  'result',
  'severity',
  'message',
  'approval_id',
  'request_id',
  'context',
] as const;

/** A small, fast, seeded PRNG (mulberry32), so two runs seed the same proportions. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

interface ActionShape {
  action: string;
  resource: (n: number) => string;
  tool: string | null;
}

const EVALUATION_ACTIONS: ActionShape[] = [
  { action: 'files.read', resource: (n) => `docs/report-${n % 500}.pdf`, tool: 'reader' },
  { action: 'files.write', resource: (n) => `workspace/drafts/${n % 800}.md`, tool: 'writer' },
  { action: 'files.delete', resource: (n) => `workspace/tmp/${n % 300}`, tool: null },
  { action: 'payments.refund', resource: (n) => `accounts/${n % 2000}/orders/${n % 97}`, tool: 'stripe' },
  { action: 'payments.charge', resource: (n) => `accounts/${n % 2000}`, tool: 'stripe' },
  { action: 'db.query', resource: (n) => `analytics.table_${n % 40}`, tool: 'sql' },
  { action: 'db.users.drop', resource: () => 'prod.users', tool: 'sql' },
  { action: 'email.send', resource: (n) => `customers/${n % 5000}`, tool: 'mailer' },
  { action: 'deploy.service', resource: (n) => `services/api-${n % 12}`, tool: 'kubectl' },
  { action: 'crm.contact.update', resource: (n) => `contacts/${n % 9000}`, tool: 'crm' },
  { action: 'secrets.read', resource: (n) => `secrets/${n % 30}/token`, tool: null },
  { action: 'tickets.close', resource: (n) => `tickets/T-${n % 10_000}`, tool: 'helpdesk' },
];
const EXECUTION_ACTIONS: ActionShape[] = [
  { action: 'http.get', resource: (n) => `https://api.example.com/v1/items/${n % 1000}`, tool: null },
  { action: 'http.post', resource: (n) => `https://api.example.com/v1/orders/${n % 1000}`, tool: null },
  { action: 'http.delete', resource: (n) => `https://api.example.com/v1/users/${n % 1000}`, tool: null },
];
const MCP_ACTIONS: ActionShape[] = [
  { action: 'mcp.github.create_issue', resource: (n) => `github/acme/repo-${n % 20}`, tool: 'create_issue' },
  { action: 'mcp.github.merge_pull_request', resource: (n) => `github/acme/repo-${n % 20}/pulls/${n % 400}`, tool: 'merge_pull_request' },
  { action: 'mcp.slack.post_message', resource: (n) => `slack/#channel-${n % 15}`, tool: 'post_message' },
  { action: 'mcp.filesystem.read_file', resource: (n) => `/srv/data/${n % 700}.json`, tool: 'read_file' },
];
const POLICIES = [
  'baseline-allow',
  'payments-guard',
  'production-writes',
  'pii-protection',
  'destructive-actions',
  'deploy-approvals',
  'secrets-access',
  'egress-allowlist',
];
const USERS = ['alice', 'bob', 'carol', 'dave', 'erin', null];
const SEVERITIES: Record<keyof typeof RESULT_SHARES, string[]> = {
  allowed: ['info', 'info', 'info', 'low'],
  blocked: ['medium', 'high', 'high', 'critical'],
  approval_required: ['medium', 'medium', 'high'],
};

const pick = <T>(random: () => number, list: readonly T[]): T => list[Math.floor(random() * list.length)] as T;

/** Agents by a skewed (1/rank) share of the traffic, as a fleet's busiest agents dominate it. */
function agentPicker(random: () => number, agents: readonly SeedAgent[]): () => SeedAgent {
  const weights = agents.map((_, i) => 1 / (i + 1));
  const total = weights.reduce((a, b) => a + b, 0);
  const cumulative: number[] = [];
  let sum = 0;
  for (const w of weights) {
    sum += w / total;
    cumulative.push(sum);
  }
  return () => {
    const r = random();
    const i = cumulative.findIndex((c) => r < c);
    return agents[i === -1 ? agents.length - 1 : i] as SeedAgent;
  };
}

/** One seeded event as a COPY row of audit_events, and its sealing-queue row. */
function eventRows(
  random: () => number,
  nextAgent: () => SeedAgent,
  workspaceId: string,
  at: number,
  n: number,
): { event: string; queued: string } {
  const agent = nextAgent();
  const s = random();
  const source = s < 0.55 ? 'evaluation' : s < 0.85 ? 'execution' : 'mcp';
  const shape = pick(random, source === 'evaluation' ? EVALUATION_ACTIONS : source === 'execution' ? EXECUTION_ACTIONS : MCP_ACTIONS);
  const r = random();
  const result: keyof typeof RESULT_SHARES =
    r < RESULT_SHARES.allowed ? 'allowed' : r < RESULT_SHARES.allowed + RESULT_SHARES.blocked ? 'blocked' : 'approval_required';
  const severity = pick(random, SEVERITIES[result]);
  const policy = result === 'allowed' && random() < 0.15 ? null : pick(random, POLICIES);
  const rule = policy ? `${policy}-r${Math.floor(random() * 10)}` : null;
  const resource = shape.resource(Math.floor(random() * 1_000_000));
  const message =
    result === 'allowed'
      ? policy
        ? `Allowed by policy '${policy}'`
        : 'No rule matched: allowed by the default decision'
      : result === 'blocked'
        ? `${shape.action} on ${resource} is blocked in ${agent.environment}`
        : `${shape.action} needs a human approval`;
  const id = timeOrderedUuid(at);
  const timestamp = new Date(at).toISOString();
  const context: Record<string, unknown> = {};
  if (rule) context.rule = rule;
  context.input = { amount: Math.floor(random() * 5000), user: pick(random, USERS), ticket: `T-${n % 10_000}` };
  if (source === 'execution') context.execution = { method: shape.action.slice(5).toUpperCase(), url: resource };
  const fields = [
    workspaceId,
    id,
    timestamp,
    source,
    agent.slug,
    agent.id,
    shape.action,
    resource,
    shape.tool,
    agent.environment,
    null,
    policy,
    result,
    severity,
    message,
    result === 'approval_required' ? timeOrderedUuid(at) : null,
    `scale-${n.toString(36)}`,
    JSON.stringify(context),
  ];
  return { event: `${fields.map(copyValue).join('\t')}\n`, queued: `${workspaceId}\t${timestamp}\t${id}\n` };
}

/** Joins lines into chunks of about 256 KB (one CopyData message each). */
function* chunked(lines: readonly string[]): Generator<string> {
  let chunk = '';
  for (const line of lines) {
    chunk += line;
    if (chunk.length >= 256 * 1024) {
      yield chunk;
      chunk = '';
    }
  }
  if (chunk) yield chunk;
}

export interface SeedOptions {
  /** Events per day of the seeded history (the spacing of their timestamps). */
  eventsPerDay: number;
  /** The newest event's time (ms). */
  endMs: number;
  /** Events per transaction (one COPY into audit_events and one into audit_unsealed each). */
  chunkEvents?: number;
  seed?: number;
  onChunk?: (seeded: number) => void;
}

export interface SeedResult {
  events: number;
  first: Date;
  last: Date;
}

/** Seeds `count` events of the workspace with COPY, chunk by chunk, each chunk one transaction. */
export async function seedAuditEvents(
  client: pg.Client,
  workspaceId: string,
  agents: readonly SeedAgent[],
  count: number,
  options: SeedOptions,
): Promise<SeedResult> {
  if (agents.length === 0) throw new Error('seeding needs at least one agent');
  const random = prng(options.seed ?? 0x5eed);
  const nextAgent = agentPicker(random, agents);
  const spacing = 86_400_000 / options.eventsPerDay;
  const start = options.endMs - Math.ceil((count - 1) * spacing);
  const chunkEvents = options.chunkEvents ?? 100_000;
  let seeded = 0;
  while (seeded < count) {
    const size = Math.min(chunkEvents, count - seeded);
    const events: string[] = new Array(size);
    const queued: string[] = new Array(size);
    for (let k = 0; k < size; k++) {
      const n = seeded + k;
      // Non-decreasing, not perfectly regular: each event somewhere in its own slot.
      const at = start + Math.floor(n * spacing + random() * spacing * 0.9);
      const rows = eventRows(random, nextAgent, workspaceId, Math.min(at, options.endMs), n);
      events[k] = rows.event;
      queued[k] = rows.queued;
    }
    await client.query('BEGIN');
    try {
      const copied = await copyFrom(client, `COPY audit_events (${EVENT_COLUMNS.join(', ')}) FROM STDIN`, chunked(events));
      const enqueued = await copyFrom(client, 'COPY audit_unsealed (workspace_id, event_timestamp, event_id) FROM STDIN', chunked(queued));
      if (copied !== size || enqueued !== size) throw new Error(`COPY wrote ${copied} events and ${enqueued} queue rows, expected ${size}`);
      await client.query('COMMIT');
    } catch (error) {
      await client.query('ROLLBACK').catch(() => undefined);
      throw error;
    }
    seeded += size;
    options.onChunk?.(seeded);
  }
  return { events: count, first: new Date(start), last: new Date(options.endMs) };
}
