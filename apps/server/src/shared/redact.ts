/**
 * What Warden shows of an act without its secrets: the audit log, an approver, webhooks, the
 * dashboard and traces all redact with these functions, so no view shows what another hides.
 * For showing only: decisions and digests are made on the real values.
 */

const SECRET_NAME =
  /pass(word|wd|phrase)?$|^pwd$|secret|token|api[-_]?key|access[-_]?key|^(proxy[-_]?)?auth(orization)?$|credential|^session(_?id)?$|signature|^sig$|^code$|cookie/i;
/**
 * A hint is the public part of a key, shown by design (`api_key_hint: "wak_<public id>_…"`),
 * never the secret; a credential's name is what an HTTP act names (`credential_name`).
 */
const PUBLIC_NAME = /_hint$|^credential_name$/i;
const isSecretName = (name: string) => SECRET_NAME.test(name) && !PUBLIC_NAME.test(name);
/** Header names that carry credentials beyond SECRET_NAME's: any `auth` (`X-Auth`, `X-Auth-Key`) and any `…-key`. */
const SECRET_HEADER = /auth|(^|[-_])key$/i;
/** An Authorization value's scheme (`Bearer`, `Basic`), which is shown: it is not the secret. */
const AUTH_SCHEME = /^([A-Za-z][A-Za-z0-9!#$%&'*+.^_`|~-]*) +\S/;

export const REDACTED = '[redacted]';

/** The URL with the values of secret-looking query parameters replaced. */
export function redactUrl(url: string): string {
  const at = url.indexOf('?');
  if (at < 0) return url;
  const end = url.indexOf('#', at);
  const query = end < 0 ? url.slice(at + 1) : url.slice(at + 1, end);
  return `${url.slice(0, at)}${redactQuery(`?${query}`)}${end < 0 ? '' : url.slice(end)}`;
}

/** A query (`?a=1&b=2`, or empty) with the values of secret-looking parameters replaced. */
export function redactQuery(search: string): string {
  if (search === '' || search === '?') return search;
  const pairs = search
    .slice(1)
    .split('&')
    .map((pair) => {
      const at = pair.indexOf('=');
      const name = at < 0 ? pair : pair.slice(0, at);
      let decoded = name;
      try {
        decoded = decodeURIComponent(name.replace(/\+/g, ' '));
      } catch {
        // a malformed escape: judge the name as written
      }
      return at >= 0 && isSecretName(decoded) ? `${name}=${encodeURIComponent(REDACTED)}` : pair;
    });
  return `?${pairs.join('&')}`;
}

/**
 * A copy of a JSON value whose secret-looking members are replaced (for showing, never for
 * deciding): a list or an object under such a name is replaced whole, and what lies deeper than
 * the walk goes is replaced too, so that nothing it could not look at is shown (the audit log
 * keeps what this returns for good).
 */
export function redactSecrets(value: unknown, depth = 0): unknown {
  if (value === null || typeof value !== 'object') return value;
  if (depth > 32) return REDACTED;
  if (Array.isArray(value)) return value.map((item) => redactSecrets(item, depth + 1));
  const out: Record<string, unknown> = {};
  for (const [key, member] of Object.entries(value)) {
    // A boolean or null says whether there is a secret, never what it is (`has_api_key: false`).
    const shown = member === null || typeof member === 'boolean' || member === undefined;
    out[key] = isSecretName(key) && !shown ? REDACTED : redactSecrets(member, depth + 1);
  }
  return out;
}

export const isSecretHeader = (name: string) => SECRET_NAME.test(name) || SECRET_HEADER.test(name);

/** One header's value as it may be shown: a credential's replaced (its auth scheme kept), a URL's secret query values replaced. */
export function redactHeader(name: string, value: string): string {
  if (isSecretHeader(name)) {
    const scheme = /authorization$/i.test(name) ? AUTH_SCHEME.exec(value) : null;
    return scheme ? `${scheme[1]} ${REDACTED}` : REDACTED;
  }
  return /^https?:\/\//i.test(value) ? redactUrl(value) : value;
}

/** Headers as they may be shown: every name, the values of credentials replaced. */
export function redactHeaders(headers: Readonly<Record<string, string>>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) out[name] = redactHeader(name, value);
  return out;
}
