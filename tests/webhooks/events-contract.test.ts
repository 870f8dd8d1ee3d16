/**
 * The webhook events in the contract: every event type the server sends is in the spec's
 * `webhooks` section, and every real delivery — received from a running server by a receiver on
 * 127.0.0.1 — validates against its event's schema there (ajv, JSON Schema 2020-12), with the
 * `WebhookEvent` union, and verifies as Standard Webhooks. Also: `approval.requested` is
 * subscribable and fires for every way an approval is created.
 */
import { readFileSync } from 'node:fs';
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import * as formatsModule from 'ajv-formats';
import { beforeAll, describe, expect, it } from 'vitest';
import { SUBSCRIBABLE_EVENTS } from '../../apps/server/src/features/webhooks/webhooks.service.ts';
import { rewriteAsAllowed } from '../support/audit-forgery.ts';
import { useTestServer } from '../support/server.ts';
import {
  closeReceiversAfterAll,
  createAgent,
  deliveryHelpers,
  ofType,
  type Receiver,
  startReceiver,
  until,
  verify,
  type Workspace,
} from './support/delivery.ts';

type FormatsPlugin = (ajv: Ajv2020) => Ajv2020;
const addFormats = ((formatsModule as { default?: unknown }).default ?? formatsModule) as FormatsPlugin;

const spec = JSON.parse(readFileSync(new URL('../../spec/dist/openapi.json', import.meta.url), 'utf8'));
const dashboardSpec = JSON.parse(readFileSync(new URL('../../spec/dist/dashboard.json', import.meta.url), 'utf8'));
const WEBHOOK_TYPES = Object.keys(spec.webhooks).sort();

const ajv = new Ajv2020({ strict: false, allErrors: true, validateSchema: false });
addFormats(ajv);
ajv.addFormat('int32', { type: 'number', validate: (n: number) => Number.isInteger(n) && n >= -(2 ** 31) && n < 2 ** 31 });
ajv.addFormat('int64', { type: 'number', validate: (n: number) => Number.isInteger(n) });
ajv.addSchema(spec, 'openapi.json');

/** The schema of the body Warden POSTs for `type`, as the spec's `webhooks` section declares it. */
const bodyValidator = (type: string): ValidateFunction => {
  const validate = ajv.getSchema(`openapi.json#/webhooks/${type}/post/requestBody/content/application~1json/schema`);
  if (!validate) throw new Error(`no webhook body schema for ${type}`);
  return validate;
};
const unionValidator = ajv.getSchema('openapi.json#/components/schemas/WebhookEvent') as ValidateFunction;

const server = useTestServer({ egressAllowlist: ['127.0.0.1/32'], auditCheckpointIntervalMs: 200 });
closeReceiversAfterAll();
const { freshWorkspace, addEndpoint } = deliveryHelpers(server);

describe('the spec lists every webhook event', () => {
  it('has a webhooks entry, with an event schema whose `type` is that one name, for every subscribable event and webhook.test', () => {
    expect(WEBHOOK_TYPES).toEqual([...SUBSCRIBABLE_EVENTS, 'webhook.test'].sort());
    for (const type of WEBHOOK_TYPES) {
      const ref: string = spec.webhooks[type].post.requestBody.content['application/json'].schema.$ref;
      const name = ref.split('/').at(-1) as string;
      expect(spec.components.schemas[name].properties.type.enum).toEqual([type]);
      expect(spec.components.schemas.WebhookEvent.discriminator.mapping[type]).toBe(ref);
    }
  });

  it('lets endpoints subscribe to exactly the subscribable events (dashboard enum), approval.requested included', () => {
    const accepted: string[] = dashboardSpec.components.schemas.WebhookEventType.enum;
    expect(accepted.filter((e) => e !== '*').sort()).toEqual([...SUBSCRIBABLE_EVENTS].sort());
    expect(accepted).toContain('approval.requested');
  });
});

describe('real deliveries validate against their event schema', () => {
  let ws: Workspace;
  let receiver: Receiver;
  let endpoint: { id: string; secret: string };
  beforeAll(async () => {
    ws = await freshWorkspace();
    receiver = await startReceiver();
    endpoint = await addEndpoint(ws, receiver);
  });

  it('sends every event type, each valid against its schema and the WebhookEvent union, and signed', async () => {
    // agent.created, audit.created (the configuration change and the decisions)
    const agent = await createAgent(ws, 'Contract Bot');
    // policy.updated: created, updated, deleted
    const policy = await ws.api('POST', '/policies', {
      body: { name: 'Refunds need approval', rules: [{ match: { action: ['refund.*'] }, effect: 'require_approval' }] },
    });
    expect(policy.status).toBe(201);
    expect((await ws.api('PATCH', `/policies/${policy.body.data.id}`, { body: { description: 'described' } })).status).toBe(200);
    const doomed = await ws.api('POST', '/policies', { body: { name: 'Doomed' } });
    expect((await ws.api('DELETE', `/policies/${doomed.body.data.id}`)).status).toBe(200);
    // approval.requested (by policy), approval.completed
    const evaluated = await ws.api('POST', '/policy/evaluate', { body: { input: { action: 'refund.create', agent: agent.slug } } });
    expect(evaluated.body.data.result).toBe('approval_required');
    const approvalId = evaluated.body.data.approval_id as string;
    expect((await ws.api('PATCH', `/approvals/${approvalId}`, { body: { status: 'approved' } })).status).toBe(200);
    // billing.updated
    await server.admin('billing.set-plan', { workspace: ws.slug, plan: 'team' });
    // webhook.test
    expect((await ws.dash.api('POST', `/webhooks/${endpoint.id}/test`)).status).toBe(202);
    // audit.checkpoint: the tree grew, so the checkpointer signs one (interval 200 ms here)
    await until(
      'the log checkpointed up to its head',
      async () => {
        const { data } = (await ws.api('GET', '/audit/verify')).body;
        return data.unsealed === 0 && data.checkpoint?.tree_size === data.tree_size;
      },
      20_000,
    );
    // audit.integrity_failed: the history rewritten under that checkpoint, as a superuser would
    await rewriteAsAllowed(server.database.db, ws.id, 'refund.create');

    await until('one delivery of every event type', () => WEBHOOK_TYPES.every((type) => ofType(receiver, type).length > 0), 20_000);
    const seen = new Set<string>();
    for (const delivery of receiver.received) {
      const payload = delivery.payload;
      const validate = bodyValidator(payload.type);
      expect(validate(payload), `${payload.type}: ${JSON.stringify(validate.errors)}`).toBe(true);
      expect(unionValidator(payload), `${payload.type} (union): ${JSON.stringify(unionValidator.errors)}`).toBe(true);
      expect(verify(delivery, endpoint.secret)).toEqual(payload);
      expect(delivery.headers['webhook-id']).toBe(payload.id);
      seen.add(payload.type);
    }
    expect([...seen].sort()).toEqual(WEBHOOK_TYPES);

    const changes = ofType(receiver, 'policy.updated').map((r) => r.payload.data.change);
    expect(changes.sort()).toEqual(['created', 'created', 'deleted', 'updated']);
    const deleted = ofType(receiver, 'policy.updated').find((r) => r.payload.data.change === 'deleted');
    expect(deleted?.payload.data.policy).toEqual(doomed.body.data);
    const requested = ofType(receiver, 'approval.requested').map((r) => r.payload.data.approval);
    expect(requested).toHaveLength(1);
    expect(requested[0]).toMatchObject({ id: approvalId, status: 'pending', policy: 'Refunds need approval', agent: agent.slug });
  });

  it('refuses a payload of one event type under another type’s schema (the schemas discriminate)', async () => {
    const approval = await until('an approval.requested delivery', () => ofType(receiver, 'approval.requested')[0]);
    expect(bodyValidator('approval.completed')(approval.payload)).toBe(false);
    expect(bodyValidator('approval.requested')({ ...approval.payload, data: { approval: { id: 'x' } } })).toBe(false);
    expect(unionValidator({ ...approval.payload, type: 'approval.unknown' })).toBe(false);
  });
});

describe('approval.requested', () => {
  it('fires for POST /approvals and POST /approval/request, carrying the pending approval as the API returns it', async () => {
    const ws = await freshWorkspace();
    const receiver = await startReceiver();
    const { secret } = await addEndpoint(ws, receiver, 'approval.requested');
    const direct = await ws.api('POST', '/approvals', { body: { title: 'Wire 5,000 EUR', context: { amount: 5000 } } });
    expect(direct.status).toBe(201);
    const alias = await ws.api('POST', '/approval/request', { body: { title: 'Through the alias' } });
    expect(alias.status).toBe(201);

    await until('both approval.requested deliveries', () => (ofType(receiver, 'approval.requested').length >= 2 ? true : undefined));
    const byId = new Map(receiver.received.map((r) => [r.payload.data.approval.id, r]));
    for (const created of [direct.body.data, alias.body.data]) {
      const delivery = byId.get(created.id);
      expect(delivery?.payload.data).toEqual({ approval: created });
      expect(verify(delivery as NonNullable<typeof delivery>, secret).type).toBe('approval.requested');
    }
    // subscribed to approval.requested only: nothing else arrives (the creations are audited too)
    expect(receiver.received.every((r) => r.payload.type === 'approval.requested')).toBe(true);
  });

  it('is accepted as a subscription by the dashboard API; an unknown event type (approval.decided) is 400 invalid_request', async () => {
    const ws = await freshWorkspace();
    const ok = await ws.dash.api('POST', '/webhooks', {
      body: { url: 'http://127.0.0.1:9/hook', events: ['approval.requested', 'approval.completed'] },
    });
    expect(ok.status).toBe(201);
    expect(ok.body.data.endpoint.events).toEqual(['approval.requested', 'approval.completed']);
    const bad = await ws.dash.api('POST', '/webhooks', {
      body: { url: 'http://127.0.0.1:9/hook', events: ['approval.decided'] },
      unchecked: true,
    });
    expect(bad.status).toBe(400);
    expect(bad.body.error.code).toBe('invalid_request');
  });

  it('is not written when a policy decision reuses a pending approval, nor when the approval is refused (404 policy)', async () => {
    const ws = await freshWorkspace();
    const receiver = await startReceiver();
    await addEndpoint(ws, receiver, 'approval.requested');
    const agent = await createAgent(ws, 'Reuser');
    expect(
      (
        await ws.api('POST', '/policies', {
          body: { name: 'Ask', rules: [{ match: { action: ['pay.*'] }, effect: 'require_approval' }] },
        })
      ).status,
    ).toBe(201);
    const first = await ws.api('POST', '/policy/evaluate', { body: { input: { action: 'pay.out', agent: agent.slug } } });
    const approvalId = first.body.data.approval_id as string;
    const again = await ws.api('POST', '/policy/evaluate', {
      body: { input: { action: 'pay.out', agent: agent.slug }, approval_id: approvalId },
    });
    expect(again.body.data.approval_id).toBe(approvalId);
    const refused = await ws.api('POST', '/approvals', { body: { title: 'Bad policy', policy: 'No such policy' } });
    expect(refused.status).toBe(404);

    await until('the approval.requested delivery', () => ofType(receiver, 'approval.requested')[0]);
    // a later event proves the worker ran past anything else that might have been written
    const marker = await ws.api('POST', '/approvals', { body: { title: 'Marker' } });
    await until('the marker', () => receiver.received.find((r) => r.payload.data.approval.id === marker.body.data.id));
    expect(receiver.received.map((r) => r.payload.data.approval.id)).toEqual([approvalId, marker.body.data.id]);
  });
});
