import { describe, expect, it } from 'vitest';
import { timeOrderedUuid } from '../src/shared/ids.ts';

const V7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

describe('timeOrderedUuid', () => {
  it('is a version-7 UUID with the RFC 9562 variant, starting with the milliseconds in hex', () => {
    const at = Date.UTC(2026, 10, 23, 3, 30, 0, 123);
    const id = timeOrderedUuid(at);
    expect(id).toMatch(V7);
    expect(Number.parseInt(id.slice(0, 8) + id.slice(9, 13), 16)).toBe(at);
  });

  it('sorts by time across milliseconds, and stays unique within one', () => {
    const ids = Array.from({ length: 1_000 }, (_, i) => timeOrderedUuid(1_700_000_000_000 + Math.floor(i / 10)));
    for (let i = 10; i < ids.length; i += 10) expect((ids[i] as string) > (ids[i - 1] as string)).toBe(true);
    expect(new Set(ids).size).toBe(ids.length);
    expect(new Set(Array.from({ length: 10_000 }, () => timeOrderedUuid(0))).size).toBe(10_000);
  });
});
