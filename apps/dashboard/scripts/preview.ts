/**
 * A static preview of the dashboard without the real backend: serves buildDashboard() with the
 * server's CSP and answers the dashboard API from canned data (any key but "wrong" logs in).
 * `npx tsx apps/dashboard/scripts/preview.ts [port]` → http://127.0.0.1:<port>/dashboard/
 */
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { buildDashboard } from '../build.ts';

const now = Date.now();
const iso = (msAgo: number) => new Date(now - msAgo).toISOString();
const EP = '6f1c2b9e-8a43-4d1a-9d1e-2f3b4c5d6e7f';

function fixtures() {
  const endpoint = (id: string, url: string, events: string[], extra: Record<string, unknown> = {}) => ({
    id,
    url,
    description: null as string | null,
    events,
    paused: false,
    disabled: false,
    secret_rotating_until: null as string | null,
    created_at: iso(86_400_000),
    updated_at: iso(3_600_000),
    ...extra,
  });
  const delivery = (status: string, extra: Record<string, unknown> = {}) => ({
    id: randomUUID(),
    endpoint_id: EP,
    event_id: randomUUID(),
    event_type: 'agent.created',
    status,
    attempts: 1,
    next_attempt_at: null,
    last_attempt_at: iso(60_000),
    response_status: 200,
    response_body: '{"ok":true}',
    last_error: null,
    created_at: iso(61_000),
    ...extra,
  });
  const approval = (title: string, status: string, extra: Record<string, unknown> = {}) => ({
    id: randomUUID(),
    title,
    description: 'Refund of order #4411 above the automatic limit.',
    priority: 'high',
    type: 'payment',
    status,
    agent: 'billing-bot',
    policy: 'payments-need-approval',
    action: 'payments.refund',
    resource: 'orders/4411',
    context: { amount: 1200 },
    decision_note: null,
    decided_by: null,
    decided_at: null,
    expires_at: iso(-86_400_000),
    consumed_at: null,
    created_at: iso(600_000),
    updated_at: iso(600_000),
    ...extra,
  });
  const agent = (name: string, extra: Record<string, unknown> = {}) => ({
    id: randomUUID(),
    slug: name.toLowerCase().replace(/\s+/g, '-'),
    name,
    provider: 'anthropic',
    status: 'active',
    environment: 'production',
    risk_level: 'high',
    description: null,
    model: 'claude-sonnet',
    tags: [],
    allowed_tools: [],
    allowed_resources: [],
    has_api_key: true,
    created_at: iso(9e8),
    updated_at: iso(3e6),
    ...extra,
  });
  return {
    endpoints: [
      endpoint(EP, 'https://hooks.example.com/warden', ['*'], { description: 'Ops alerts' }),
      endpoint(randomUUID(), 'https://billing.example.org/in/warden-events', ['billing.updated', 'approval.completed'], { paused: true }),
      endpoint(randomUUID(), 'https://gone.example.net/hook', ['agent.created'], { disabled: true }),
    ],
    deliveries: [
      delivery('pending', {
        attempts: 2,
        response_status: 503,
        response_body: 'Service Unavailable',
        last_error: 'HTTP 503',
        next_attempt_at: iso(-300_000),
        event_type: 'policy.updated',
      }),
      delivery('succeeded'),
      delivery('failed', {
        attempts: 7,
        response_status: null,
        response_body: null,
        last_error: 'connect ECONNREFUSED 203.0.113.7:443',
        event_type: 'audit.created',
      }),
      delivery('skipped', {
        attempts: 0,
        response_status: null,
        response_body: null,
        last_attempt_at: null,
        event_type: 'billing.updated',
      }),
    ],
    approvals: [
      approval('Refund 1,200 EUR to customer 88', 'pending'),
      approval('Deploy model v7 to production', 'pending', {
        type: 'deployment',
        priority: 'urgent',
        action: 'deploy',
        resource: 'prod/cluster-1',
        description: null,
      }),
      approval('Export customer table', 'rejected', {
        decision_note: 'Contains PII; use the anonymised view.',
        decided_by: 'alice-admin',
        decided_at: iso(7_200_000),
      }),
      approval('Send newsletter', 'approved', { decided_by: 'bob', decided_at: iso(9_000_000) }),
    ],
    agents: [
      agent('Support Bot', { risk_level: 'low', environment: 'staging' }),
      agent('Billing Bot'),
      agent('Research Agent', { risk_level: null, has_api_key: false, status: 'suspended', environment: 'development' }),
    ],
    plan: 'team',
  };
}

const ACTIONS = ['payments.refund', 'email.send', 'db.query', 'deploy'];
const RESULTS = ['allowed', 'blocked', 'approval_required'];
const SEVERITIES = ['info', 'low', 'medium', 'high', 'critical'];
const audit = Array.from({ length: 60 }, (_, i) => ({
  id: randomUUID(),
  sequence: i < 3 ? null : 60 - i,
  event_timestamp: iso(i * 90_000),
  source: 'evaluation',
  agent: i % 3 ? 'billing-bot' : 'support-bot',
  action: ACTIONS[i % 4],
  resource: `orders/${4400 + i}`,
  tool: null,
  environment: 'production',
  user: null,
  policy: i % 2 ? 'payments-need-approval' : null,
  result: RESULTS[i % 3],
  severity: SEVERITIES[i % 5],
  message: i % 3 === 1 ? 'Refunds above 1000 are blocked' : null,
  approval_id: null,
  request_id: null,
  context: {},
  hash: i < 3 ? null : 'ab'.repeat(32),
}));

export async function startPreview(port = 0): Promise<{ server: Server; url: string }> {
  const files = await buildDashboard();
  let data = fixtures();
  let loggedIn = false;
  const defaults = { development: 'allow', staging: 'allow', production: 'block' };
  const csrf = 'csrf-preview-token';
  const send = (res: ServerResponse, status: number, body: unknown) => {
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify(body));
  };
  const error = (res: ServerResponse, status: number, code: string, message: string) => send(res, status, { error: { code, message } });
  const readBody = async (req: IncomingMessage) => {
    let text = '';
    for await (const chunk of req) text += chunk;
    return text ? JSON.parse(text) : undefined;
  };
  const session = () => ({
    data: {
      workspace: { id: randomUUID(), slug: 'default', name: 'Acme Robotics', plan: data.plan },
      key_id: '00000000-0000-4000-8000-000000000001',
      key_name: 'bootstrap',
      permissions: ['admin', 'approvals:decide', 'audit:read', 'agents:read', 'compliance:read'],
      csrf_token: csrf,
      expires_at: iso(-8 * 3_600_000),
    },
  });

  const server = createServer(async (req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    const p = url.pathname;
    if (p === '/dashboard') {
      res.writeHead(301, { location: '/dashboard/' });
      return res.end();
    }
    if (!p.startsWith('/dashboard/api/')) {
      const file = files.get(p.replace(/^\/dashboard/, '') || '/');
      if (!file) {
        res.writeHead(404);
        return res.end('not found');
      }
      res.writeHead(200, { 'content-type': file.type, 'content-security-policy': "default-src 'self'" });
      return res.end(file.body);
    }
    const api = p.slice('/dashboard/api'.length);
    const m = req.method ?? 'GET';
    if (api === '/session' && m === 'POST') {
      const body = await readBody(req);
      if (body?.api_key === 'wrong') return error(res, 401, 'unauthorized', 'Unknown or revoked API key.');
      loggedIn = true;
      data = fixtures();
      res.setHeader('set-cookie', 'warden_session=preview; HttpOnly; SameSite=Strict; Path=/dashboard');
      return send(res, 200, session());
    }
    if (!loggedIn) return error(res, 401, 'unauthorized', 'No session.');
    if (m !== 'GET' && req.headers['x-csrf-token'] !== csrf)
      return error(res, 403, 'insufficient_permission', 'Missing or wrong CSRF token.');
    const page = (rows: unknown[]) => ({ data: rows, has_more: false, next_cursor: null });
    if (api === '/session' && m === 'GET') return send(res, 200, session());
    if (api === '/session' && m === 'DELETE') {
      loggedIn = false;
      return send(res, 200, { data: { id: randomUUID(), deleted: true } });
    }
    if (api === '/webhooks' && m === 'GET') return send(res, 200, page(data.endpoints));
    if (api === '/webhooks' && m === 'POST') {
      const body = await readBody(req);
      const endpoint = {
        ...data.endpoints[0]!,
        id: randomUUID(),
        url: body.url,
        events: body.events,
        description: body.description ?? null,
        created_at: iso(0),
      };
      data.endpoints.unshift(endpoint);
      return send(res, 201, { data: { endpoint, secret: `whsec_${Buffer.from(randomUUID()).toString('base64')}` } });
    }
    const wh = /^\/webhooks\/([^/]+)(\/.*)?$/.exec(api);
    if (wh) {
      const endpoint = data.endpoints.find((e) => e.id === wh[1]);
      if (!endpoint) return error(res, 404, 'not_found', 'No such endpoint.');
      const rest = wh[2] ?? '';
      if (rest === '' && m === 'GET') return send(res, 200, { data: endpoint });
      if (rest === '' && m === 'PATCH') {
        Object.assign(endpoint, await readBody(req), { updated_at: iso(0) });
        if (endpoint.paused === false) endpoint.disabled = false;
        return send(res, 200, { data: endpoint });
      }
      if (rest === '' && m === 'DELETE') {
        data.endpoints = data.endpoints.filter((e) => e !== endpoint);
        return send(res, 200, { data: { id: endpoint.id, deleted: true } });
      }
      if (rest === '/deliveries') return send(res, 200, page(data.deliveries));
      if (rest === '/rotate-secret') {
        const body = await readBody(req);
        endpoint.secret_rotating_until = body?.overlap_seconds ? iso(-body.overlap_seconds * 1000) : null;
        return send(res, 200, { data: { endpoint, secret: 'whsec_rotatedPreviewSecretAAAAAAAAAAAAAAAAAAAA' } });
      }
      if (rest === '/test' || rest.endsWith('/replay')) {
        const d = {
          ...data.deliveries[1]!,
          id: randomUUID(),
          status: 'succeeded',
          event_type: rest === '/test' ? 'webhook.test' : 'agent.created',
          created_at: iso(0),
        };
        data.deliveries.unshift(d);
        return send(res, 202, { data: { ...d, status: 'pending' } });
      }
    }
    if (api === '/approvals' && m === 'GET') {
      const status = url.searchParams.get('status');
      return send(res, 200, page(status ? data.approvals.filter((a) => a.status === status) : data.approvals));
    }
    const ap = /^\/approvals\/([^/]+)$/.exec(api);
    if (ap && m === 'PATCH') {
      const a = data.approvals.find((x) => x.id === ap[1]);
      if (!a) return error(res, 404, 'not_found', 'No such approval.');
      if (a.status !== 'pending') return error(res, 409, 'approval_already_decided', 'Already decided.');
      const body = await readBody(req);
      if (body.status === 'rejected' && !body.decision_note?.trim())
        return error(res, 400, 'decision_note_required', 'Rejecting needs a decision_note.');
      Object.assign(a, { status: body.status, decision_note: body.decision_note ?? null, decided_by: 'bootstrap', decided_at: iso(0) });
      return send(res, 200, { data: a });
    }
    if (api === '/audit-logs') {
      let rows = audit;
      for (const k of ['agent', 'action', 'result', 'severity'] as const) {
        const v = url.searchParams.get(k);
        if (v) rows = rows.filter((r) => r[k] === v);
      }
      const start = Number(url.searchParams.get('cursor') ?? 0);
      const limit = Number(url.searchParams.get('limit') ?? 20);
      const more = start + limit < rows.length;
      return send(res, 200, { data: rows.slice(start, start + limit), has_more: more, next_cursor: more ? String(start + limit) : null });
    }
    if (api === '/audit/verify')
      return send(res, 200, { data: { valid: true, checked: 57, unsealed: 3, first_invalid_sequence: null, verified_at: iso(0) } });
    if (api === '/compliance')
      return send(res, 200, {
        data: {
          score: 72.5,
          framework_score: 60,
          control_coverage: 83.3,
          risk_score: 41.2,
          calculated_at: iso(0),
          controls: [
            {
              id: 'agents_risk_rated',
              name: 'Agents carry a risk level',
              description: 'Every active agent has a risk level.',
              status: 'fail',
              score: 66.7,
              weight: 2,
              frameworks: ['ISO42001:A.6.2.8', 'EU-AI-Act:Art.9'],
            },
            {
              id: 'production_enforced',
              name: 'Production agents are covered by an enforcing policy',
              description: 'Agents in production match an enforcing rule.',
              status: 'pass',
              score: 100,
              weight: 3,
              frameworks: ['ISO42001:A.9.2'],
            },
            {
              id: 'high_risk_approval',
              name: 'High-risk actions require approval',
              description: 'High and critical severity rules require approval.',
              status: 'pass',
              score: 100,
              weight: 2,
              frameworks: ['NIST-AI-RMF:GOVERN-1.3'],
            },
            {
              id: 'agent_keys',
              name: 'Agents carry keys',
              description: 'Each agent has a registered agent key.',
              status: 'fail',
              score: 66.7,
              weight: 1,
              frameworks: ['ISO27001:A.5.17'],
            },
            {
              id: 'audit_chain',
              name: 'The audit chain verifies',
              description: 'All sealed audit events verify.',
              status: 'pass',
              score: 100,
              weight: 3,
              frameworks: ['ISO42001:A.6.2.8'],
            },
            {
              id: 'mcp_registry',
              name: 'MCP servers are registered',
              description: 'No MCP servers to check.',
              status: 'not_applicable',
              score: 0,
              weight: 1,
              frameworks: [],
            },
          ],
        },
      });
    if (api === '/agents') return send(res, 200, page(data.agents));
    if (api === '/settings' && m === 'PATCH') Object.assign(defaults, (await readBody(req)).default_decision);
    if (api === '/settings') return send(res, 200, { data: { default_decision: defaults } });
    if (api === '/billing' && m === 'GET') return send(res, 200, { data: { plan: data.plan, billing_status: 'active' } });
    // Read-only stubs for the configuration pages (the real server tests them end to end).
    if (api === '/keys' && m === 'GET') {
      const key = { name: 'bootstrap', prefix: 'wk_prev', permissions: session().data.permissions, revoked_at: null };
      return send(res, 200, page([{ id: session().data.key_id, created_at: iso(86_400_000), ...key }]));
    }
    if ((api === '/policies' || api === '/mcp-servers') && m === 'GET') return send(res, 200, page([]));
    if (api === '/insights' && m === 'GET') {
      const decisions = Array.from({ length: 8 }, (_, i) => ({
        start: new Date(Date.now() - (7 - i) * 86_400_000).toISOString().slice(0, 10).concat('T00:00:00.000Z'),
        allowed: 20 + ((i * 7) % 11),
        blocked: (i * 3) % 7,
        approval_required: i % 4,
      }));
      return send(res, 200, {
        data: {
          from: iso(7 * 86_400_000),
          to: iso(0),
          bucket: 'day',
          decisions,
          top_blocked_actions: [
            { name: 'payments.refund', count: 9 },
            { name: 'db.query', count: 4 },
          ],
          top_blocked_agents: [{ name: 'billing-bot', count: 11 }],
          approvals_waiting: { count: 2, oldest_created_at: iso(5_400_000), under_1h: 1, from_1h_to_24h: 1, over_24h: 0 },
        },
      });
    }
    return error(res, 404, 'route_not_found', `No stub for ${m} ${api}`);
  });
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  const address = server.address();
  const actual = typeof address === 'object' && address ? address.port : port;
  return { server, url: `http://127.0.0.1:${actual}/dashboard/` };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { url } = await startPreview(Number(process.argv[2] ?? 4180));
  console.log(`dashboard preview at ${url}`);
}
