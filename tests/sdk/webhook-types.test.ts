/**
 * The SDK's webhook types, checked by the TypeScript compiler under strict settings: what
 * `verifyWebhook` returns is a union discriminated by `type`, so a `switch` on `type` gives each
 * event's `data` its own type, reading another event's field is a compile error, and a switch
 * over every type is exhaustive. Also at run time: a real signed body comes back as that union.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Webhook } from 'standardwebhooks';
import ts from 'typescript';
import { afterAll, describe, expect, expectTypeOf, it } from 'vitest';
import {
  type Approval,
  type Policy,
  verifyWebhook,
  type WebhookEvent,
  type WebhookEventOf,
  type WebhookEventType,
} from '../../packages/sdk/src/index.ts';

const SDK = fileURLToPath(new URL('../../packages/sdk/src/index.js', import.meta.url));
const sandbox = mkdtempSync(join(tmpdir(), 'warden-webhook-types-'));
afterAll(() => rmSync(sandbox, { recursive: true, force: true }));

/** Type-checks `source` (an ES module importing the SDK's sources) strictly; answers the diagnostics as text. */
function typecheck(name: string, source: string): string[] {
  const file = join(sandbox, `${name}.mts`);
  writeFileSync(file, source.replaceAll('@agentwarden/sdk', SDK));
  const program = ts.createProgram([file], {
    strict: true,
    noUncheckedIndexedAccess: true,
    exactOptionalPropertyTypes: true,
    noImplicitReturns: true,
    noFallthroughCasesInSwitch: true,
    verbatimModuleSyntax: true,
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    lib: ['lib.es2022.d.ts', 'lib.dom.d.ts', 'lib.dom.iterable.d.ts'],
    types: [],
    noEmit: true,
    skipLibCheck: true,
  });
  return ts
    .getPreEmitDiagnostics(program)
    .filter((d) => d.file === undefined || d.file.fileName === file)
    .map(
      (d) =>
        `${d.start === undefined ? '' : `${d.file?.getLineAndCharacterOfPosition(d.start).line}: `}${ts.flattenDiagnosticMessageText(d.messageText, '\n')}`,
    );
}

const RECEIVER = `
import { verifyWebhook, type WebhookEvent } from '@agentwarden/sdk';

export async function receive(body: string, headers: Record<string, string>): Promise<string> {
  const event = await verifyWebhook(body, headers, 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw');
  const id: string = event.id;
  switch (event.type) {
    case 'agent.created':
      return event.data.agent.slug;
    case 'policy.updated': {
      const change: 'created' | 'updated' | 'deleted' = event.data.change;
      return \`\${event.data.policy.name} \${change} v\${event.data.policy.version}\`;
    }
    case 'audit.created':
      return event.data.event.action + String(event.data.event.sequence ?? 'unsealed');
    case 'audit.checkpoint':
      return event.data.checkpoint.root_hash + event.data.checkpoint.tree_size.toFixed(0);
    case 'audit.integrity_failed':
      return event.data.refusal.reason + event.data.refusal.signed_size.toFixed(0);
    case 'approval.requested':
    case 'approval.completed':
      return event.data.approval.status + event.data.approval.title;
    case 'billing.updated':
      return event.data.plan + event.data.previous_plan;
    case 'webhook.test':
      return event.data.message + id;
    default: {
      const unknown: never = event;
      return String(unknown);
    }
  }
}

export const first = (events: WebhookEvent[]): string | undefined =>
  events.find((e): e is Extract<WebhookEvent, { type: 'approval.requested' }> => e.type === 'approval.requested')?.data.approval.id;
`;

describe('verifyWebhook types (tsc, strict)', () => {
  it('narrows the union by `type`: every event type typed, and a switch over all of them exhaustive', () => {
    expect(typecheck('receiver', RECEIVER)).toEqual([]);
  });

  it("refuses another event's field, an unknown type and a missing case in an exhaustive switch", () => {
    const errors = typecheck(
      'wrong',
      `
import { verifyWebhook } from '@agentwarden/sdk';
const event = await verifyWebhook('', {}, 'whsec_x');
if (event.type === 'agent.created') {
  console.log(event.data.approval);
}
if (event.type === 'approval.decided') console.log('never sent');
switch (event.type) {
  case 'agent.created':
    break;
  default: {
    const rest: never = event;
    console.log(rest);
  }
}
console.log(event.data.agent);
`,
    );
    expect(errors).toHaveLength(4);
    expect(errors[0]).toMatch(/^4: Property 'approval' does not exist/);
    expect(errors[1]).toMatch(/^6: This comparison appears to be unintentional.*"approval\.decided"/);
    expect(errors[2]).toMatch(/^11: Type .* is not assignable to type 'never'/);
    expect(errors[3]).toMatch(/^15: Property 'agent' does not exist/);
  });
});

describe('verifyWebhook at run time', () => {
  it('returns the verified body as a WebhookEvent that narrows like its type says', async () => {
    const secret = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
    const body = JSON.stringify({
      id: '5f0c3a9e-2b1d-4e8f-a6c7-3d2e1f0a9b8c',
      type: 'approval.requested',
      created_at: '2026-01-01T00:00:00.000Z',
      workspace_id: '0b6d1c5e-8f2a-4c3b-9d7e-1a2b3c4d5e6f',
      data: { approval: { id: 'a1', title: 'Refund 120 EUR', status: 'pending' } },
    });
    const at = new Date();
    const headers = {
      'webhook-id': 'msg_1',
      'webhook-timestamp': String(Math.floor(at.getTime() / 1000)),
      'webhook-signature': new Webhook(secret).sign('msg_1', at, body),
    };
    const event = await verifyWebhook(body, headers, secret);
    expectTypeOf(event).toEqualTypeOf<WebhookEvent>();
    if (event.type !== 'approval.requested') throw new Error(`unexpected ${event.type}`);
    expectTypeOf(event.data.approval).toEqualTypeOf<Approval>();
    expect(event.data.approval.title).toBe('Refund 120 EUR');
  });

  it('names each event type and each event (WebhookEventType, WebhookEventOf)', () => {
    expectTypeOf<WebhookEventType>().toEqualTypeOf<
      | 'agent.created'
      | 'policy.updated'
      | 'audit.created'
      | 'audit.checkpoint'
      | 'audit.integrity_failed'
      | 'approval.requested'
      | 'approval.completed'
      | 'billing.updated'
      | 'webhook.test'
    >();
    expectTypeOf<WebhookEventOf<'policy.updated'>['data']['policy']>().toEqualTypeOf<Policy>();
    expectTypeOf<WebhookEventOf<'policy.updated'>['data']['change']>().toEqualTypeOf<'created' | 'updated' | 'deleted'>();
  });
});
