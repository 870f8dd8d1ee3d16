/**
 * What Warden shows of an act without its secrets: the audit log, an approver, webhooks, the
 * dashboard and traces all redact with these functions, so no view shows what another hides.
 * For showing only: decisions and digests are made on the real values. Secrets are found by
 * name (isSecretName) and by value (secret-values.ts), so that neither a secret under an
 * innocent name nor one under a name the list lacks is kept.
 */
import { REDACTED, redactSecretValues } from './secret-values.ts';

/**
 * Names of secrets, compared once lower-cased with separators dropped (`privateKey`,
 * `private_key` and `private-key` are `privatekey`): any name holding one of SECRET_PARTS, one
 * of SECRET_NAMES, or ending in a key word of KEY_NAME (`ssh_key`, `masterKey`; not
 * `publicKey` or `sortKey`) or `auth` (`basicAuth`).
 */
const SECRET_PARTS =
  /pass(word|wd|phrase)|secret|token|apikey|accesskey|privatekey|credential|cookie|signature|jwt|bearer|session(id|key)|sessid|authorization$|mnemonic|seedphrase|connectionstring/;
const SECRET_NAMES = new Set(['pass', 'pwd', 'pw', 'pin', 'otp', 'sig', 'code', 'auth', 'session', 'key', 'dsn', 'cvv', 'proxyauth']);
const KEY_NAME =
  /(^|api|access|private|secret|ssh|signing|encryption|master|client|auth|license|account|session|shared|app|service|subscription|deploy|gpg|pgp|rsa|ecdsa|ed25519|hmac|crypto|wallet|root|admin|webhook)key$|auth$/;
/**
 * A hint is the public part of a key, shown by design (`api_key_hint: "wak_<public id>_…"`),
 * never the secret; a credential's name is what an HTTP act names (`credential_name`).
 */
const PUBLIC_NAME = /hint$|^credentialname$/;
const normalName = (name: string) => name.toLowerCase().replace(/[^a-z0-9]/g, '');
/** Whether a member, parameter or header name is a secret's (see SECRET_PARTS). */
export function isSecretName(name: string): boolean {
  const normal = normalName(name);
  if (PUBLIC_NAME.test(normal)) return false;
  return SECRET_NAMES.has(normal) || SECRET_PARTS.test(normal) || KEY_NAME.test(normal);
}
/**
 * Whether a name is a secret's even where it stands in prose as `name: value`: every secret name
 * but the short generic ones (`key`, `code`, `session`, …), which messages use for other things
 * (`No such key: x`, `key:<id>` naming an API key).
 */
const isSecretNameInProse = (name: string) => isSecretName(name) && !SECRET_NAMES.has(normalName(name));
/** A value redacted already, whole or but for its auth scheme. */
const ALREADY_REDACTED = /^([A-Za-z][A-Za-z0-9._~+/-]* )?\[redacted\]$/;
/** Header names that carry credentials beyond isSecretName's: any `auth` (`X-Auth`, `X-Auth-Key`) and any `…-key`. */
const SECRET_HEADER = /auth|(^|[-_])key$/i;
/** An Authorization value's scheme (`Bearer`, `Basic`), which is shown: it is not the secret. */
const AUTH_SCHEME = /^([A-Za-z][A-Za-z0-9!#$%&'*+.^_`|~-]*) +\S/;

export { REDACTED } from './secret-values.ts';

/** A text with every secret it shows by its form replaced (shared/secret-values.ts): for messages, resources and any string value. */
export const redactText = (text: string): string => redactSecretValues(text, { isSecretName, isSecretNameInProse });

/** The URL with the values of secret-looking query parameters replaced, and any secret it shows by its form (a password in it, a token). */
export function redactUrl(url: string): string {
  const at = url.indexOf('?');
  if (at < 0) return redactText(url);
  const end = url.indexOf('#', at);
  const query = end < 0 ? url.slice(at + 1) : url.slice(at + 1, end);
  return redactText(`${url.slice(0, at)}${redactQuery(`?${query}`)}${end < 0 ? '' : url.slice(end)}`);
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
 * A copy of a JSON value whose secret-looking members, and secrets in its texts, are replaced (for showing, never for
 * deciding): a list or an object under such a name is replaced whole, and what lies deeper than
 * the walk goes is replaced too, so that nothing it could not look at is shown (the audit log
 * keeps what this returns for good).
 */
export function redactSecrets(value: unknown, depth = 0): unknown {
  if (typeof value === 'string') return redactText(value);
  if (value === null || typeof value !== 'object') return value;
  if (depth > 32) return REDACTED;
  if (Array.isArray(value)) return value.map((item) => redactSecrets(item, depth + 1));
  const out: Record<string, unknown> = {};
  for (const [key, member] of Object.entries(value)) {
    // A boolean or null says whether there is a secret, never what it is (`has_api_key: false`).
    // so is a value already redacted (an Authorization header's `Bearer [redacted]`): redacting is idempotent
    const shown =
      member === null ||
      typeof member === 'boolean' ||
      member === undefined ||
      (typeof member === 'string' && ALREADY_REDACTED.test(member));
    out[key] = isSecretName(key) && !shown ? REDACTED : redactSecrets(member, depth + 1);
  }
  return out;
}

export const isSecretHeader = (name: string) => isSecretName(name) || SECRET_HEADER.test(name);

/** One header's value as it may be shown: a credential's replaced (its auth scheme kept), a URL's secret query values replaced. */
export function redactHeader(name: string, value: string): string {
  if (isSecretHeader(name)) {
    const scheme = /authorization$/i.test(name) ? AUTH_SCHEME.exec(value) : null;
    return scheme ? `${scheme[1]} ${REDACTED}` : REDACTED;
  }
  return /^https?:\/\//i.test(value) ? redactUrl(value) : redactText(value);
}

/** Headers as they may be shown: every name, the values of credentials replaced. */
export function redactHeaders(headers: Readonly<Record<string, string>>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) out[name] = redactHeader(name, value);
  return out;
}
