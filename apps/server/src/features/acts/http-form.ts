/**
 * The one form of an HTTP request Warden sends: its path and its headers as policy decides on
 * them, an approval binds them and the proxy sends them (execution/http-proxy.ts sends the
 * facts, nothing else). What an upstream could read in another way than the policy did is
 * refused before anything is decided or sent:
 * - paths with a stray `%`, an encoded `/` or `\`, a control character (raw or encoded), a `;` (path
 *   parameters: Tomcat, Jetty and Spring drop them, so `/admin;x/users` and `/x/..;/admin`
 *   reach `/admin/…`), an empty segment (`//admin`: nginx merges slashes), bytes that are not
 *   UTF-8 once decoded (overlong forms of `/` and `.`), or a dot segment left after decoding;
 * - method and URL override headers and a `_method` query parameter or body member (in any spelling
 *   PHP reads as one: `.method`, `%2Emethod`, ` .method`), by which frameworks run another method
 *   or path than the one decided on.
 */
import { ApiError } from '../../shared/errors.ts';
import { phpParameterName } from './readings.ts';

const UNRESERVED = /^[A-Za-z0-9\-._~]$/;

/**
 * RFC 3986 §6.2.2 normalisation of a path the WHATWG parser has already resolved (dot
 * segments, `%2E` ones included): percent-encoded unreserved characters decoded (`/%61dmin` is
 * `/admin` to any server), other escapes upper-cased. The request is sent in this form.
 */
const decodeUnreserved = (path: string) =>
  path.replace(/%([0-9A-Fa-f]{2})/g, (escaped, hex: string) => {
    const char = String.fromCharCode(Number.parseInt(hex, 16));
    return UNRESERVED.test(char) ? char : escaped.toUpperCase();
  });

// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are exactly what is looked for
const RAW_CONTROL = /[\u0000-\u001F\u007F]/;
const ENCODED_SEPARATOR = /%(2F|5C)/i;
const ENCODED_CONTROL = /%([01][0-9A-F]|7F)/i;
const PATH_PARAMETER = /;|%3B/i;
const STRAY_PERCENT = /%(?![0-9A-Fa-f]{2})/;

const refusedUrl = (why: string): never => {
  throw new ApiError('invalid_execution_url', `execution.url: ${why}`);
};

/** Refuses a URL whose raw text has a control character (the WHATWG parser drops tabs and newlines, so `/ad\nmin` would be `/admin`). */
export function checkRawUrl(url: string): void {
  if (RAW_CONTROL.test(url)) refusedUrl('control characters are not accepted');
}

/**
 * The path as decided on and sent, from the WHATWG parser's path, or 400
 * `invalid_execution_url` naming why it is refused. Checked once decoded, so that decoding
 * cannot make what it refuses (`%2%46` would otherwise become `%2F`).
 */
export function sentPath(parsedPath: string): string {
  if (STRAY_PERCENT.test(parsedPath)) refusedUrl('a % in the path that does not start an escape (%XX) is refused');
  const path = decodeUnreserved(parsedPath);
  if (ENCODED_SEPARATOR.test(path))
    refusedUrl('an encoded / or \\ (%2F, %5C) in the path is refused: upstreams disagree on whether it separates segments');
  if (ENCODED_CONTROL.test(path)) refusedUrl('an encoded control character (%00–%1F, %7F) in the path is refused');
  if (PATH_PARAMETER.test(path))
    refusedUrl('a ; in the path is refused: servers that strip path parameters would run another path than the one decided on');
  if (path.includes('//')) refusedUrl('an empty path segment (//) is refused: servers that merge slashes would run another path');
  try {
    decodeURIComponent(path);
  } catch {
    refusedUrl('the path is not UTF-8 once percent-decoded');
  }
  // Never met after the parser resolved them; if decoding ever made one, the forms would differ.
  if (path.split('/').some((segment) => segment === '.' || segment === '..')) refusedUrl('a dot segment appears in the path once decoded');
  return path;
}

/** A parameter name an upstream reads as `_method`: in any case, encoded once or twice, or renamed by PHP (`.method`, ` method`). */
const isMethodParameter = (name: string) => phpParameterName(name).toLowerCase() === '_method';

/** Whether form-encoded text (`a=1&b=2`) names a `_method` parameter, however spelled. */
const namesMethod = (form: string) => form.split(/[&;]/).some((pair) => isMethodParameter(pair.split('=', 1)[0] ?? ''));

/** Refuses a `_method` query parameter in any spelling PHP reads as one (Laravel and Symfony run the method it names for a POST). */
export function checkQuery(search: string): void {
  if (search.length > 1 && namesMethod(search.slice(1)))
    throw new ApiError(
      'invalid_execution',
      'execution.url: a _method query parameter overrides the method the upstream runs; it is refused',
    );
}

/**
 * Refuses a JSON object body with a top-level `_method` member (Laravel reads it from JSON bodies
 * too), and a string body that names one as a form would (sent with a form's content type, PHP
 * parses the JSON string's text as one).
 */
export function checkBody(body: unknown): void {
  const named =
    typeof body === 'string'
      ? namesMethod(body)
      : body !== null && typeof body === 'object' && !Array.isArray(body) && Object.keys(body).some(isMethodParameter);
  if (named)
    throw new ApiError('invalid_execution', 'execution.body: a _method member overrides the method the upstream runs; it is refused');
}

/**
 * Headers by which frameworks run another method or path than the request's: the method
 * overrides of Express's method-override, Rails, Laravel, Symfony, ASP.NET and Google APIs, and
 * the URL overrides of IIS, Symfony and Zend.
 */
export const OVERRIDE_HEADERS: ReadonlySet<string> = new Set([
  'x-http-method-override',
  'x-http-method',
  'x-method-override',
  'x-original-url',
  'x-rewrite-url',
]);

/**
 * Headers that carry a credential to an upstream: what "agents hold no credentials" refuses
 * from an agent (decisions.ts). Authorization and Cookie (any scheme), and the API-key headers
 * of widely used APIs (Anthropic, OpenAI-compatible gateways, Azure, Google, GitLab, AWS).
 * Proxy-Authorization never travels (hop-by-hop) but is refused too: the agent tried.
 */
export const CREDENTIAL_HEADERS: ReadonlySet<string> = new Set([
  'authorization',
  'proxy-authorization',
  'cookie',
  'x-api-key',
  'api-key',
  'x-auth-token',
  'x-access-token',
  'private-token',
  'x-goog-api-key',
  'ocp-apim-subscription-key',
  'x-amz-security-token',
]);

const HOP_BY_HOP = [
  'connection',
  'keep-alive',
  'proxy-authenticate',
  'proxy-authorization',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
];
export const HOP_BY_HOP_HEADERS: ReadonlySet<string> = new Set(HOP_BY_HOP);
const NEVER_SENT = new Set([...HOP_BY_HOP, 'host', 'content-length', 'expect']);

const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
const UNSAFE_VALUE = /[\r\n\0]/;

/**
 * The headers sent, lower-cased, values without surrounding whitespace (RFC 9110 §5.5): the
 * caller's minus what never travels — hop-by-hop headers (the fixed list and any named in the
 * caller's own Connection header, §7.6.1), Host, Content-Length, Expect and X-Warden-* — plus
 * `content-type: application/json` for a body unless the caller names one. 400
 * `invalid_execution`, before anything is decided or sent, for a malformed name, a value with
 * CR, LF or NUL, a name given twice, or an override header.
 */
export function sentHeaders(headers: Readonly<Record<string, string>> | undefined, hasBody: boolean): Record<string, string> {
  const given = Object.entries(headers ?? {});
  const declaredHopByHop = new Set(
    given
      .filter(([name]) => name.toLowerCase() === 'connection')
      .flatMap(([, value]) => value.split(',').map((t) => t.trim().toLowerCase())),
  );
  const seen = new Set<string>();
  const out: Record<string, string> = {};
  for (const [name, value] of given) {
    if (!TOKEN.test(name) || UNSAFE_VALUE.test(value)) {
      throw new ApiError('invalid_execution', `execution.headers: '${name.slice(0, 64)}' is not a valid header name and value`);
    }
    const lower = name.toLowerCase();
    if (OVERRIDE_HEADERS.has(lower))
      throw new ApiError('invalid_execution', `execution.headers: '${name}' overrides the method or URL the upstream runs; it is refused`);
    if (seen.has(lower)) throw new ApiError('invalid_execution', `execution.headers: '${name}' is given twice`);
    seen.add(lower);
    if (!NEVER_SENT.has(lower) && !declaredHopByHop.has(lower) && !lower.startsWith('x-warden-'))
      out[lower] = value.replace(/^[ \t]+|[ \t]+$/g, '');
  }
  if (hasBody) out['content-type'] ??= 'application/json';
  return out;
}
