/**
 * Secrets found by what they look like, wherever they stand in a text (shared/redact.ts finds
 * them by name): private-key PEM blocks, JWTs, credentials in URLs (`postgres://admin:pw@db`),
 * `Bearer …` and `name=value` / `name: value` pairs whose name is a secret's, and the token
 * formats secretlint's recommended rules know (AWS, GitHub, Slack, OpenAI, Anthropic, Stripe,
 * npm, connection strings, …), run synchronously here on each text, never on a file.
 */
import { rules as secretlintRules } from '@secretlint/secretlint-rule-preset-recommend';

export const REDACTED = '[redacted]';

/** Shorter texts hold no secret worth the scan (and names, slugs and methods are short). */
const MIN_SCANNED = 8;
/** Every token format secretlint knows has a run this long of token characters: texts without one (prose, names) skip its scan. */
const TOKEN_RUN = /[A-Za-z0-9_\-+/=.]{20,}/;

const PEM_PRIVATE = /-----BEGIN ((?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?)-----[\s\S]*?(?:-----END \1-----|$)/g;
const JWT = /\beyJ[A-Za-z0-9_-]{2,}\.[A-Za-z0-9_-]{2,}\.[A-Za-z0-9_-]*/g;
const URL_USERINFO = /\b([a-z][a-z0-9+.-]*:\/\/)([^\s/?#@"'<>]+)@/gi;
const AUTH_SCHEME_VALUE = /\b(Bearer|Basic|Token|Digest|Negotiate)(\s+)[A-Za-z0-9._~+/=-]{8,}/g;
/** A query or form parameter: `?name=value`, `&name=value`, `;name=value`. */
const PARAMETER = /([?&;])([^=&#\s?;]+)=([^&#\s"'<>;]*)/g;
/** `name=value` or `name: value` at the start of a text or after a space or `{,;(` (logs, YAML, JSON text, connection strings). */
const NAMED_VALUE = /(^|[\s{,;(])(["']?)([A-Za-z_][A-Za-z0-9_.-]*)\2(\s*[=:]\s*)(["']?)([^\s"'&;,<>]+)/g;

/** A value replaced already (as is, or percent-encoded in a query). */
const isRedacted = (value: string) => value.startsWith(REDACTED) || value.startsWith(ENCODED_REDACTED);
const ENCODED_REDACTED = encodeURIComponent(REDACTED);

/** A parameter's name as a server reads it (`+` a space, escapes decoded); as written when malformed. */
function decoded(name: string): string {
  try {
    return decodeURIComponent(name.replace(/\+/g, ' '));
  } catch {
    return name;
  }
}

/** A user name this long in a URL (`https://<token>@github.com`) is taken for a token. */
const TOKEN_LIKE_USER = 16;

type Report = { range: readonly [number, number] };
interface ScanRule {
  meta: { type?: string };
  create(context: unknown, options: unknown): { file?: (source: unknown) => unknown };
}

/** Where the scanners report: the ranges of the text being scanned now (scans are synchronous, so one at a time). */
let reported: Array<readonly [number, number]> = [];
/** The preset's scanners, created once: a scan is then one call per rule (its filters aside). */
const scanners = (secretlintRules as unknown as ScanRule[])
  .filter((rule) => rule.meta.type !== 'filter')
  .map((rule) =>
    rule.create(
      {
        createTranslator: () => () => '',
        report: (report: Report) => reported.push(report.range),
        ignore: () => undefined,
        sharedOptions: {},
      },
      {},
    ),
  );

/** Ranges of `text` that secretlint's recommended rules report. */
function secretlintRanges(text: string): Array<readonly [number, number]> {
  reported = [];
  const source = { content: text, filePath: undefined, ext: '', contentType: 'text' };
  // every rule of the preset reports synchronously but the one that reads .p12 files, which a text never is
  for (const scanner of scanners) scanner.file?.(source);
  const ranges = reported;
  reported = [];
  return ranges;
}

/** `text` with the given ranges replaced by REDACTED. */
function replaceRanges(text: string, ranges: Array<readonly [number, number]>): string {
  if (ranges.length === 0) return text;
  const sorted = [...ranges].sort((a, b) => a[0] - b[0]);
  let out = '';
  let at = 0;
  for (const [start, end] of sorted) {
    if (end <= at) continue;
    out += `${text.slice(at, Math.max(start, at))}${REDACTED}`;
    at = end;
  }
  return out + text.slice(at);
}

/**
 * `text` with every secret it shows by its form replaced. `isSecretName` judges the names of
 * `name=value` pairs (query strings, form bodies, connection strings), `isSecretNameInProse`
 * those of `name: value` (logs, YAML, JSON text), where short generic names mean other things.
 */
export function redactSecretValues(
  text: string,
  names: { isSecretName: (name: string) => boolean; isSecretNameInProse: (name: string) => boolean },
): string {
  const { isSecretName, isSecretNameInProse } = names;
  if (text.length < MIN_SCANNED) return text;
  let out = TOKEN_RUN.test(text) ? replaceRanges(text, secretlintRanges(text)) : text;
  if (out.includes('-----BEGIN')) out = out.replace(PEM_PRIVATE, REDACTED);
  if (out.includes('eyJ')) out = out.replace(JWT, REDACTED);
  if (out.includes('://'))
    out = out.replace(URL_USERINFO, (whole, scheme: string, userinfo: string) => {
      const colon = userinfo.indexOf(':');
      if (colon >= 0) return `${scheme}${userinfo.slice(0, colon)}:${REDACTED}@`;
      return userinfo.length >= TOKEN_LIKE_USER ? `${scheme}${REDACTED}@` : whole;
    });
  out = out.replace(AUTH_SCHEME_VALUE, `$1$2${REDACTED}`);
  if (out.includes('='))
    out = out.replace(PARAMETER, (whole, lead: string, name: string, value: string) =>
      !isRedacted(value) && isSecretName(decoded(name)) ? `${lead}${name}=${REDACTED}` : whole,
    );
  if (out.includes('=') || out.includes(':'))
    out = out.replace(NAMED_VALUE, (whole, lead: string, quote: string, name: string, separator: string, open: string, value: string) =>
      !isRedacted(value) && !value.startsWith('//') && (separator.includes('=') ? isSecretName(name) : isSecretNameInProse(name))
        ? `${lead}${quote}${name}${quote}${separator}${open}${REDACTED}`
        : whole,
    );
  return out;
}
