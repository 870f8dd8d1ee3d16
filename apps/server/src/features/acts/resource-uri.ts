/**
 * The one form of an MCP resource URI that Warden decides on and sends upstream, so that no
 * other spelling of the same resource slips past a rule (`FILE:///secret.txt`,
 * `file:///./secret.txt`, `file://localhost/secret.txt` are all `file:///secret.txt` to an
 * upstream that parses URIs as the MCP SDK does, with WHATWG URL).
 *
 * Normalisation (RFC 3986 §6.2.2 and §6.2.3, RFC 8089 for `file:`):
 * - the scheme lower-cased; a URI without one is refused (MCP resource URIs are absolute);
 * - percent-encoding: escapes of unreserved characters decoded, others upper-cased; characters
 *   a URI may not hold (space, non-ASCII, `"<>^`{|}`) percent-encoded as UTF-8 (RFC 3987 §3.1);
 * - with an authority: the host in the form WHATWG URL gives a special URL's host, for every scheme
 *   (canonicalHost: `http://2130706433/` is `http://127.0.0.1/`), an empty or default port dropped (http 80,
 *   https 443, ws 80, wss 443, ftp 21), an empty http(s)/ws(s) path made `/`;
 * - hierarchical paths (an authority, or a path that starts with `/`): dot segments removed
 *   (after decoding, so `%2E%2E` is `..`);
 * - `file:`: `file://localhost/p` and `file:/p` are `file:///p`, `file:p` is `file:///p` (as
 *   WHATWG URL reads it), and empty segments are dropped (`file:////p` names `/p` to a file system);
 * - any other URI without an authority whose path does not start with `/` (`urn:`, `foo:bar`)
 *   is opaque: scheme and percent-encoding normalised only, its path as sent.
 *
 * Refused (ResourceUriError, a JSON-RPC invalid params): control characters, raw or encoded
 * (`%00`–`%1F`, `%7F`); an http(s), ws(s) or ftp URI without a host; a
 * file URI with a port or user information; a host WHATWG URL
 * cannot parse; leading or trailing white space; malformed escapes; and, before the
 * query, backslashes and encoded separators (`%2F`, `%5C`), which an upstream may decode or read
 * as `/` after the decision (`/public%2F..%2Fsecret`). In the query and fragment they are data.
 */

/** A URI that cannot be normalised safely: the message says why, for the client. */
export class ResourceUriError extends Error {}

const SCHEME = /^([A-Za-z][A-Za-z0-9+.-]*):/;
const UNRESERVED = /[A-Za-z0-9\-._~]/;
/** What RFC 3986 lets a URI hold as it is: unreserved, reserved and `%`. */
const URI_CHARACTER = /[A-Za-z0-9\-._~:/?#[\]@!$&'()*+,;=%]/;
const DEFAULT_PORTS: Record<string, string> = { http: '80', https: '443', ws: '80', wss: '443', ftp: '21' };
const EMPTY_PATH_IS_ROOT = new Set(['http', 'https', 'ws', 'wss']);

/** C0, DEL and C1 control characters. */
const isControl = (code: number) => code < 0x20 || (code >= 0x7f && code <= 0x9f);

const refuse = (why: string): never => {
  throw new ResourceUriError(`Invalid resource URI: ${why}`);
};

/** RFC 3986 §6.2.2.1–2 on one component: escapes normalised, characters a URI cannot hold encoded. */
function normaliseEncoding(component: string, what: string, separatorsAllowed: boolean): string {
  let out = '';
  for (let i = 0; i < component.length; i++) {
    const char = component[i] as string;
    if (char === '%') {
      const hex = component.slice(i + 1, i + 3);
      if (!/^[0-9A-Fa-f]{2}$/.test(hex)) refuse(`malformed percent-encoding at '${component.slice(i, i + 3)}' in the ${what}`);
      const code = Number.parseInt(hex, 16);
      if (code < 0x20 || code === 0x7f) refuse(`an encoded control character (%${hex.toUpperCase()}) in the ${what}`);
      if (!separatorsAllowed && (code === 0x2f || code === 0x5c))
        refuse(`an encoded separator (%${hex.toUpperCase()}) in the ${what}, which an upstream may decode into a path`);
      const decoded = String.fromCharCode(code);
      out += UNRESERVED.test(decoded) ? decoded : `%${hex.toUpperCase()}`;
      i += 2;
    } else if (URI_CHARACTER.test(char)) out += char;
    else if (char === '\\' && !separatorsAllowed) refuse(`a backslash in the ${what}, which an upstream may read as '/'`);
    else {
      const point = component.codePointAt(i) as number;
      const text = String.fromCodePoint(point);
      try {
        out += encodeURIComponent(text);
      } catch {
        refuse(`a character that is not Unicode text (a lone surrogate) in the ${what}`);
      }
      i += text.length - 1;
    }
  }
  return out;
}

/** RFC 3986 §5.2.4. */
function removeDotSegments(path: string): string {
  const output: string[] = [];
  const segments = path.split('/');
  const absolute = path.startsWith('/');
  for (const [index, segment] of segments.entries()) {
    if (absolute && index === 0) continue;
    const last = index === segments.length - 1;
    if (segment === '.') {
      if (last) output.push('');
    } else if (segment === '..') {
      if (output.length > 0) output.pop();
      if (last) output.push('');
    } else output.push(segment);
  }
  return (absolute ? '/' : '') + output.join('/');
}

/** The normal form of a resource URI (see the module's comment); throws ResourceUriError. */
export function normaliseResourceUri(uri: string): string {
  for (let i = 0; i < uri.length; i++) if (isControl(uri.charCodeAt(i))) refuse('it holds a control character');
  if (uri.trim() !== uri) refuse('it starts or ends with white space');
  const scheme = SCHEME.exec(uri)?.[1];
  if (scheme === undefined) refuse(`'${uri.slice(0, 64)}' has no scheme (resource URIs are absolute)`);
  const lowerScheme = (scheme as string).toLowerCase();
  // RFC 3986 Appendix B, after the scheme
  const rest = uri.slice((scheme as string).length + 1);
  const parts = /^(\/\/([^/?#]*))?([^?#]*)(\?[^#]*)?(#.*)?$/.exec(rest) as RegExpExecArray;
  let authority = parts[2];
  let path = normaliseEncoding(parts[3] ?? '', 'path', false);
  const query = parts[4] === undefined ? '' : `?${normaliseEncoding(parts[4].slice(1), 'query', true)}`;
  const fragment = parts[5] === undefined ? '' : `#${normaliseEncoding(parts[5].slice(1), 'fragment', true)}`;

  if (authority !== undefined) authority = normaliseAuthority(authority, lowerScheme);
  // WHATWG URL takes the first path segment of `http:///a` or `http:/a` for the host
  if (lowerScheme in DEFAULT_PORTS && authority === undefined) refuse(`a ${lowerScheme} URI without a host`);
  if (lowerScheme === 'file') {
    if (authority === 'localhost') authority = '';
    if (authority === undefined) authority = '';
    if (!path.startsWith('/')) path = `/${path}`;
    path = path.replace(/\/{2,}/g, '/');
  }
  const hierarchical = authority !== undefined || path.startsWith('/');
  if (hierarchical) path = removeDotSegments(path);
  if (authority !== undefined && path === '' && EMPTY_PATH_IS_ROOT.has(lowerScheme)) path = '/';
  // a path of `//x` without an authority would read as one: keep it a path (RFC 3986 §5.3)
  if (authority === undefined && path.startsWith('//')) path = `/.${path}`;
  return `${lowerScheme}:${authority === undefined ? '' : `//${authority}`}${path}${query}${fragment}`;
}

/**
 * A host as WHATWG URL reads a special URL's host, whatever the URI's scheme (an upstream that
 * reads `foo://127.1/` may connect as `http` would): IPv4 in any notation (`2130706433`,
 * `0x7f000001`, `127.1`, `0177.0.0.1`, `127.0.0.1.`) as dotted decimal, IPv6 compressed
 * (`[0::1]` is `[::1]`), an IPv4-mapped IPv6 address as its IPv4 (`[::ffff:7f00:1]` is
 * `127.0.0.1`), names lower-cased and IDNA-mapped to ASCII (`ⓛocalhost` is `localhost`), and one
 * trailing dot of a name dropped (`localhost.` resolves as `localhost`). What it cannot parse is refused.
 */
function canonicalHost(host: string): string {
  if (host === '') return host;
  // a backslash is a path separator to WHATWG URL: it would silently cut the host short
  if (host.includes('\\')) refuse('a backslash in the host');
  let parsed: string;
  try {
    parsed = new URL(`http://${host}/`).hostname;
  } catch {
    return refuse(`the host '${host.slice(0, 64)}' is not a host name or IP address WHATWG URL accepts`);
  }
  const mapped = /^\[::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})\]$/.exec(parsed);
  if (mapped) {
    const [high, low] = [Number.parseInt(mapped[1] as string, 16), Number.parseInt(mapped[2] as string, 16)];
    return `${high >> 8}.${high & 255}.${low >> 8}.${low & 255}`;
  }
  // an empty label (`a..b`, `.a`) is no name a resolver looks up; refusing it keeps one form per host
  if (/^\.|\.\./.test(parsed)) refuse(`the host '${parsed.slice(0, 64)}' has an empty label`);
  return parsed.startsWith('[') ? parsed : parsed.replace(/\.$/, '');
}

function normaliseAuthority(authority: string, scheme: string): string {
  const at = authority.lastIndexOf('@');
  const userinfo = at < 0 ? null : normaliseEncoding(authority.slice(0, at), 'user information', false);
  const hostPort = /^(\[[^\]]*\]|[^:[\]]*)(?::(.*))?$/.exec(authority.slice(at + 1));
  if (!hostPort) refuse('a malformed host');
  const [, rawHost, port] = hostPort as RegExpExecArray;
  if (port !== undefined && !/^\d*$/.test(port)) refuse('a port that is not a number');
  if (scheme === 'file' && (port !== undefined || userinfo !== null)) refuse('a file URI with a port or user information');
  const host = canonicalHost(normaliseEncoding(rawHost as string, 'host', false));
  if (scheme in DEFAULT_PORTS && host === '') refuse(`a ${scheme} URI without a host`);
  const number = port === undefined || port === '' ? null : String(Number(port));
  const keptPort = number === null || number === DEFAULT_PORTS[scheme] ? '' : `:${number}`;
  return `${userinfo === null ? '' : `${userinfo}@`}${host}${keptPort}`;
}
