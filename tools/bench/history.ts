/**
 * An audit history that looks like a fleet's decisions, for the scenarios that read one (the
 * what-if replay, the scale of the log): a workspace of 20 agents and 3 policies made through
 * the API, then N events written with COPY straight into audit_events and, in the same
 * transaction, the sealing queue, as an event recorded inside a transaction is. Sources, agents
 * (1/rank shares), actions, results and severities come in realistic, skewed proportions;
 * timestamps at a fixed rate ending now, so a larger history is a longer one, not a busier day.
 * The server's own sealer seals them and its checkpointer signs the tree: nothing here hashes.
 */
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import pg from 'pg';
import copyStreams from 'pg-copy-streams';
import { timeOrderedUuid } from '../../apps/server/src/shared/ids.ts';
import { log, type Warden } from './lab.ts';
import { prng } from './micro.ts';
import { sleep } from './procs.ts';

export interface SeedAgent {
  id: string;
  slug: string;
  environment: string;
}

/** What the workspace enforces while the decisions are recorded. */
export const LIVE_POLICIES = [
  {
    name: 'destructive-actions',
    priority: 100,
    rules: [{ id: 'r0', match: { action: ['*.delete', 'db.*.drop'] }, effect: 'block', severity: 'critical' }],
  },
  {
    name: 'payments-guard',
    priority: 99,
    rules: [{ id: 'r0', match: { action: ['payments.*'] }, condition: 'context.amount > 1000', effect: 'require_approval' }],
  },
  { name: 'baseline-allow', priority: 1, rules: [{ id: 'r0', match: { action: ['*'] }, effect: 'allow', severity: 'info' }] },
];

/** 20 agents (every fifth with allowed tools) and the live policies, through the API; answers the agents and the workspace. */
export async function seedWorkspace(warden: Warden): Promise<{ agents: SeedAgent[]; workspaceId: string }> {
  const agents: SeedAgent[] = [];
  for (let i = 1; i <= 20; i++) {
    const environment = (['production', 'production', 'staging', 'development'] as const)[i % 4] as string;
    const { data } = await warden.call('POST', '/agents', {
      name: `Fleet agent ${i}`,
      slug: `scale-agent-${String(i).padStart(2, '0')}`,
      provider: i % 2 ? 'anthropic' : 'openai',
      environment,
      risk_level: (['low', 'medium', 'high'] as const)[i % 3],
      tags: ['bench', `team-${i % 5}`],
      ...(i % 5 === 0 && { allowed_tools: ['reader', 'writer', 'sql', 'stripe', 'create_issue'] }),
    });
    agents.push({ id: data.id, slug: data.slug, environment });
  }
  for (const policy of LIVE_POLICIES) await warden.call('POST', '/policies', policy);
  const name = (await warden.call('GET', '/audit/signing-key')).data.key_name as string;
  return { agents, workspaceId: name.slice(name.lastIndexOf('/') + 1) };
}

// ---------------------------------------------------------------- the events

const COLUMNS =
  'workspace_id, id, event_timestamp, source, agent, agent_id, action, resource, tool, environment, user_name, policy, result, severity, message, approval_id, request_id, context';

/** Share of each result among the events (`result=blocked` is the listing filter the scale scenario measures). */
const RESULTS = [
  ['allowed', 0.6, ['info', 'info', 'info', 'low']],
  ['blocked', 0.25, ['medium', 'high', 'high', 'critical']],
  ['approval_required', 0.15, ['medium', 'medium', 'high']],
] as const;

type Shape = [action: string, resource: (n: number) => string, tool: string | null];
const ACTIONS: Record<'evaluation' | 'execution' | 'mcp', Shape[]> = {
  evaluation: [
    ['files.read', (n) => `docs/report-${n % 500}.pdf`, 'reader'],
    ['files.write', (n) => `workspace/drafts/${n % 800}.md`, 'writer'],
    ['files.delete', (n) => `workspace/tmp/${n % 300}`, null],
    ['payments.refund', (n) => `accounts/${n % 2000}/orders/${n % 97}`, 'stripe'],
    ['payments.charge', (n) => `accounts/${n % 2000}`, 'stripe'],
    ['db.query', (n) => `analytics.table_${n % 40}`, 'sql'],
    ['db.users.drop', () => 'prod.users', 'sql'],
    ['email.send', (n) => `customers/${n % 5000}`, 'mailer'],
    ['deploy.service', (n) => `services/api-${n % 12}`, 'kubectl'],
    ['crm.contact.update', (n) => `contacts/${n % 9000}`, 'crm'],
    ['secrets.read', (n) => `secrets/${n % 30}/token`, null],
    ['tickets.close', (n) => `tickets/T-${n % 10_000}`, 'helpdesk'],
  ],
  execution: [
    ['http.get', (n) => `https://api.example.com/v1/items/${n % 1000}`, null],
    ['http.post', (n) => `https://api.example.com/v1/orders/${n % 1000}`, null],
    ['http.delete', (n) => `https://api.example.com/v1/users/${n % 1000}`, null],
  ],
  mcp: [
    ['mcp.github.create_issue', (n) => `github/acme/repo-${n % 20}`, 'create_issue'],
    ['mcp.github.merge_pull_request', (n) => `github/acme/repo-${n % 20}/pulls/${n % 400}`, 'merge_pull_request'],
    ['mcp.slack.post_message', (n) => `slack/#channel-${n % 15}`, 'post_message'],
    ['mcp.filesystem.read_file', (n) => `/srv/data/${n % 700}.json`, 'read_file'],
  ],
};
const POLICY_NAMES = [
  'baseline-allow',
  'payments-guard',
  'production-writes',
  'pii-protection',
  'destructive-actions',
  'deploy-approvals',
  'secrets-access',
];
const USERS = ['alice', 'bob', 'carol', 'dave', 'erin', null];

/** A value in COPY's text format. */
const copyValue = (value: string | null) =>
  value === null ? '\\N' : value.replace(/[\\\t\n\r]/g, (c) => ({ '\\': '\\\\', '\t': '\\t', '\n': '\\n', '\r': '\\r' })[c] as string);

/** The event rows and queue rows of one transaction, in COPY's text format. */
function rows(random: () => number, agents: readonly SeedAgent[], workspaceId: string, times: number[], first: number) {
  const pick = <T>(list: readonly T[]): T => list[Math.floor(random() * list.length)] as T;
  // agents by a 1/rank share of the traffic, as a fleet's busiest agents dominate it
  const cumulative: number[] = [];
  for (const i of agents.keys()) cumulative.push((cumulative.at(-1) ?? 0) + 1 / (i + 1));
  const agentAt = (r: number) => agents[cumulative.findIndex((c) => c > r * (cumulative.at(-1) as number))] ?? (agents.at(-1) as SeedAgent);
  let events = '';
  let queued = '';
  times.forEach((at, k) => {
    const agent = agentAt(random());
    const s = random();
    const source = s < 0.55 ? 'evaluation' : s < 0.85 ? 'execution' : 'mcp';
    const [action, resourceOf, tool] = pick(ACTIONS[source]);
    const r = random();
    const [result, , severities] = (r < 0.6 ? RESULTS[0] : r < 0.85 ? RESULTS[1] : RESULTS[2]) as (typeof RESULTS)[number];
    const policy = result === 'allowed' && random() < 0.15 ? null : pick(POLICY_NAMES);
    const resource = resourceOf(Math.floor(random() * 1_000_000));
    const message =
      result === 'allowed'
        ? policy
          ? `Allowed by policy '${policy}'`
          : 'No rule matched: allowed by the default decision'
        : result === 'blocked'
          ? `${action} on ${resource} is blocked in ${agent.environment}`
          : `${action} needs a human approval`;
    const n = first + k;
    const context = {
      ...(policy && { rule: `${policy}-r${Math.floor(random() * 10)}` }),
      input: { amount: Math.floor(random() * 5000), user: pick(USERS), ticket: `T-${n % 10_000}` },
      ...(source === 'execution' && { execution: { method: action.slice(5).toUpperCase(), url: resource } }),
    };
    const id = timeOrderedUuid(at);
    const timestamp = new Date(at).toISOString();
    const fields = [
      workspaceId,
      id,
      timestamp,
      source,
      agent.slug,
      agent.id,
      action,
      resource,
      tool,
      agent.environment,
      null,
      policy,
      result,
      pick(severities),
      message,
      result === 'approval_required' ? timeOrderedUuid(at) : null,
      `scale-${n.toString(36)}`,
      JSON.stringify(context),
    ];
    events += `${fields.map(copyValue).join('\t')}\n`;
    queued += `${workspaceId}\t${timestamp}\t${id}\n`;
  });
  return { events, queued };
}

/** Streams `data` (COPY's text format) into a `COPY … FROM STDIN`; answers the rows copied. */
async function copyFrom(client: pg.Client, text: string, data: string): Promise<number> {
  const stream = client.query(copyStreams.from(text));
  await pipeline(Readable.from([data]), stream);
  return Number(stream.rowCount);
}

/** Seeds `count` events ending just before now, at `perDay`, 100,000 per transaction; answers when the first chunk committed and the time span. */
export async function seedHistory(warden: Warden, workspace: { agents: SeedAgent[]; workspaceId: string }, count: number, perDay: number) {
  const client = new pg.Client({ connectionString: warden.db.url, application_name: 'bench-seed' });
  await client.connect();
  const random = prng(0x5eed);
  const spacing = 86_400_000 / perDay;
  const end = Date.now() - 1_000;
  const start = end - Math.ceil((count - 1) * spacing);
  let firstCommitAt = 0;
  try {
    for (let seeded = 0; seeded < count; seeded += 100_000) {
      const size = Math.min(100_000, count - seeded);
      // non-decreasing, not perfectly regular: each event somewhere in its own slot
      const times = Array.from({ length: size }, (_, k) =>
        Math.min(end, start + Math.floor((seeded + k) * spacing + random() * spacing * 0.9)),
      );
      const { events, queued } = rows(random, workspace.agents, workspace.workspaceId, times, seeded);
      await client.query('BEGIN');
      const copied = await copyFrom(client, `COPY audit_events (${COLUMNS}) FROM STDIN`, events);
      const enqueued = await copyFrom(client, 'COPY audit_unsealed (workspace_id, event_timestamp, event_id) FROM STDIN', queued);
      if (copied !== size || enqueued !== size) throw new Error(`COPY wrote ${copied} events and ${enqueued} queue rows, expected ${size}`);
      await client.query('COMMIT');
      firstCommitAt ||= Date.now();
      log(`  seeded ${(seeded + size).toLocaleString('en')} of ${count.toLocaleString('en')}`);
    }
  } finally {
    await client.end();
  }
  return { firstCommitAt, first: new Date(start).toISOString(), last: new Date(end).toISOString() };
}

/**
 * Waits until the tree head and a signed checkpoint cover every event of the workspace and its
 * queue is empty; gives up when the tree has not grown for `stallSeconds`. Answers the sealing
 * rate each 10 s, and how long the checkpoint came after the tree covered everything.
 */
export async function waitSealed(pool: pg.Pool, workspaceId: string, stallSeconds = 120) {
  const target = Number((await pool.query('SELECT count(*) AS n FROM audit_events WHERE workspace_id = $1', [workspaceId])).rows[0].n);
  const state = async () => {
    const { rows } = await pool.query(
      'SELECT (SELECT tree_size FROM audit_tree_heads WHERE workspace_id = $1) AS tree, (SELECT max(tree_size) FROM audit_checkpoints WHERE workspace_id = $1) AS checkpoint, EXISTS (SELECT 1 FROM audit_unsealed WHERE workspace_id = $1) AS queued',
      [workspaceId],
    );
    return { tree: Number(rows[0].tree ?? 0), checkpoint: Number(rows[0].checkpoint ?? 0), queued: rows[0].queued === true };
  };
  const started = Date.now();
  const ratePer10s: number[] = [];
  let [window, windowTree, lastTree, lastProgress] = [started, (await state()).tree, 0, started];
  let coveredAt: number | undefined;
  for (;;) {
    const now = Date.now();
    const { tree, checkpoint, queued } = await state();
    if (tree > lastTree) [lastTree, lastProgress] = [tree, now];
    if (now - window >= 10_000) {
      ratePer10s.push(Math.round(((tree - windowTree) * 1000) / (now - window)));
      [window, windowTree] = [now, tree];
      log(`  sealing: tree ${tree.toLocaleString('en')} of ${target.toLocaleString('en')}`);
    }
    if (coveredAt === undefined && tree >= target) coveredAt = now;
    if (coveredAt !== undefined && checkpoint >= target && !queued)
      return {
        events: target,
        coveredAt,
        seconds: (coveredAt - started) / 1000,
        checkpointLagSeconds: (now - coveredAt) / 1000,
        ratePer10s,
      };
    if (now - lastProgress > stallSeconds * 1000)
      throw new Error(`sealing stalled at tree ${tree} of ${target} (checkpoint ${checkpoint}) for ${stallSeconds} s`);
    await sleep(500);
  }
}
