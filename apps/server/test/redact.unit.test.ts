/** What every view of an act redacts (shared/redact.ts): secret-looking names' values; a key's public hint stays. */
import { describe, expect, it } from 'vitest';
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

  it("keeps a key's hint, the public part shown by design, in members and query parameters", () => {
    expect(redactSecrets({ agent: { api_key_hint: 'wak_0123456789abcdef_…', has_api_key: true } })).toEqual({
      agent: { api_key_hint: 'wak_0123456789abcdef_…', has_api_key: true },
    });
    expect(redactUrl('https://x.test/a?api_key_hint=wak_1')).toBe('https://x.test/a?api_key_hint=wak_1');
  });
});
