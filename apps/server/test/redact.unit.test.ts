/** What every view of an act redacts (shared/redact.ts): secret-looking names' values; a key's public hint stays. */
import { describe, expect, it } from 'vitest';
import { withRedactedContext } from '../src/features/dashboard/redact.ts';
import { REDACTED, redactSecrets, redactUrl } from '../src/shared/redact.ts';

describe('redactSecrets and redactUrl', () => {
  it('redacts the values of secret-looking members and query parameters, at any depth', () => {
    expect(redactSecrets({ api_key: 'k', nested: { access_token: 't', password: 'p' }, list: [{ secret: 's' }], name: 'n' })).toEqual({
      api_key: REDACTED,
      nested: { access_token: REDACTED, password: REDACTED },
      list: [{ secret: REDACTED }],
      name: 'n',
    });
    expect(redactUrl('https://x.test/a?access_token=abc&page=2')).toBe(
      `https://x.test/a?access_token=${encodeURIComponent(REDACTED)}&page=2`,
    );
  });

  it('replaces a list or an object under a secret-looking name whole, and what lies deeper than the walk', () => {
    expect(redactSecrets({ api_key: ['sk-live-1'], token: { value: 'sk-live-2' }, has_token: false, password: null })).toEqual({
      api_key: REDACTED,
      token: REDACTED,
      has_token: false,
      password: null,
    });
    let deep: unknown = { password: 'sk-live-3' };
    for (let i = 0; i < 40; i++) deep = { a: deep };
    expect(JSON.stringify(redactSecrets(deep))).not.toContain('sk-live-3');
    expect(JSON.stringify(redactSecrets(deep))).toContain(REDACTED);
  });

  it("keeps a key's hint, the public part shown by design, in members and query parameters", () => {
    expect(redactSecrets({ agent: { api_key_hint: 'wak_0123456789abcdef_…', has_api_key: true } })).toEqual({
      agent: { api_key_hint: 'wak_0123456789abcdef_…', has_api_key: true },
    });
    expect(redactUrl('https://x.test/a?api_key_hint=wak_1')).toBe('https://x.test/a?api_key_hint=wak_1');
  });
});

describe("the dashboard's audit rows (withRedactedContext)", () => {
  it('redacts an act and the outcome event folded into it (view=acts)', () => {
    const outcome = { id: 'o', context: { outcome: 'succeeded', execution: { arguments: { token: 't' } } } };
    const act = { id: 'd', context: { input: { password: 'p', amount: 1 } }, outcome_event: outcome };
    expect(withRedactedContext(act)).toEqual({
      id: 'd',
      context: { input: { password: REDACTED, amount: 1 } },
      outcome_event: { id: 'o', context: { outcome: 'succeeded', execution: { arguments: { token: REDACTED } } } },
    });
    expect(withRedactedContext({ id: 'x', context: {}, outcome_event: null })).toEqual({ id: 'x', context: {}, outcome_event: null });
  });
});
