import { describe, expect, it } from 'vitest';
import { canonicalEvent, eventLeafHash } from '../src/features/audit/tree.ts';
import { stableJson } from '../src/shared/canonical-json.ts';

type Event = Parameters<typeof canonicalEvent>[0];

const event = (context: unknown): Event =>
  ({
    workspace_id: '0b6f2f4e-5d1c-4a55-9d0e-6f2b8c1e7a10',
    id: '7d1e0c55-3c0f-4a8e-b1f4-2a9c5e6d8f01',
    event_timestamp: new Date('2026-01-02T03:04:05.678Z'),
    source: 'evaluation',
    agent: 'billing-bot',
    agent_id: null,
    action: 'refund.create',
    resource: 'orders/42',
    tool: null,
    environment: 'production',
    user_name: null,
    policy: 'Refunds',
    result: 'approval_required',
    severity: 'high',
    message: 'Needs a human \u{1F600}',
    approval_id: null,
    request_id: 'req-1',
    context,
  }) as unknown as Event;

describe('canonicalEvent and eventLeafHash: the audit tree leaves', () => {
  const context = { z: [1, 2.5, -0, 1e21, null, true, 'é'], a: { y: { x: [] }, b: {} }, '10': 'ten', '2': 'two', A: '"quoted"\n' };

  it('writes the frozen canonical bytes (field order, sorted keys at every depth, JSON escapes)', () => {
    // Frozen: the spec documents these bytes (AuditInclusionProof.leaf); a change breaks every tree.
    expect(canonicalEvent(event(context))).toBe(
      '["0b6f2f4e-5d1c-4a55-9d0e-6f2b8c1e7a10","7d1e0c55-3c0f-4a8e-b1f4-2a9c5e6d8f01","2026-01-02T03:04:05.678Z","evaluation",' +
        '"billing-bot",null,"refund.create","orders/42",null,"production",null,"Refunds","approval_required","high",' +
        '"Needs a human \u{1F600}",null,"req-1",{"10":"ten","2":"two","A":"\\"quoted\\"\\n","a":{"b":{},"y":{"x":[]}},"z":[1,2.5,0,1e+21,null,true,"é"]}]',
    );
  });

  it('hashes a leaf as RFC 9162 does: SHA-256(0x00 ‖ canonical bytes), pinned by an independent computation', () => {
    expect(eventLeafHash(event(context)).toString('hex')).toBe('840ec69ab351722a90fb87db443236cc9a8637aa57ae1d2d4497427c7dc9addf');
  });

  it('does not depend on the order of keys', () => {
    expect(eventLeafHash(event({ a: 1, b: { c: 2, d: 3 } }))).toEqual(eventLeafHash(event({ b: { d: 3, c: 2 }, a: 1 })));
  });

  it('hashes a value nested 100,000 levels deep without exhausting the stack', () => {
    let deep: unknown = 'bottom';
    for (let i = 0; i < 100_000; i++) deep = i % 2 ? { a: deep } : [deep];
    expect(eventLeafHash(event(deep)).toString('hex')).toMatch(/^[0-9a-f]{64}$/);
  });
});

describe('stableJson', () => {
  /** The element-by-element serialisation the fast path for lists of primitives must equal. */
  const reference = (value: unknown): string => {
    if (Array.isArray(value)) return `[${value.map(reference).join(',')}]`;
    if (value !== null && typeof value === 'object') {
      const keys = Object.keys(value).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
      return `{${keys.map((k) => `${JSON.stringify(k)}:${reference((value as Record<string, unknown>)[k])}`).join(',')}}`;
    }
    return JSON.stringify(value ?? null);
  };

  it('writes lists of primitives byte for byte as the element-by-element walk does', () => {
    const values = [
      [],
      [1, 2.5, -0, 1e21, 'a"b\\c\u2028', true, false, null, undefined, Number.NaN, Number.POSITIVE_INFINITY],
      { b: [3, 'x'], a: [{ z: [null, 'é'] }, [1, [2, ['3']]]], '10': [], '9': [0] },
      Array.from({ length: 1000 }, (_, i) => (i % 3 === 0 ? i : i % 3 === 1 ? `s${i}` : null)),
    ];
    for (const value of values) expect(stableJson(value)).toBe(reference(value));
  });
});
