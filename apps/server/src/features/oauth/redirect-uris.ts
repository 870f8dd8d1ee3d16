/**
 * Which redirect URIs a client may register (RFC 8252 §7, OAuth 2.1 §2.3.1), by dynamic
 * registration or in a Client ID Metadata Document: `https`; `http` only to a loopback host
 * (a native app's local listener: `127.0.0.1`, `[::1]`, `localhost`); or a private-use scheme
 * of a native app (`com.example.app:/cb`, `cursor://…`), never one a browser runs or reads
 * (`javascript:`, `data:`, `file:`, …). None may carry a fragment.
 */

const LOOPBACK = new Set(['127.0.0.1', '[::1]', 'localhost']);
/** Schemes that are not an app's: a browser runs, reads or fetches them itself. */
const NOT_AN_APP = new Set(['javascript', 'data', 'file', 'vbscript', 'about', 'blob', 'ftp', 'ws', 'wss', 'view-source', 'filesystem']);

/** Why `uri` may not be registered as a redirect URI, or null when it may. */
export function redirectUriRefusal(uri: string): string | null {
  const url = URL.parse(uri);
  if (!url) return `'${uri.slice(0, 100)}' is not an absolute URI`;
  if (url.hash !== '' || uri.includes('#')) return `'${uri.slice(0, 100)}' has a fragment`;
  const scheme = url.protocol.slice(0, -1);
  if (scheme === 'https') return null;
  if (scheme === 'http')
    return LOOPBACK.has(url.hostname)
      ? null
      : `'${uri.slice(0, 100)}': plain http only to a loopback host (127.0.0.1, [::1], localhost); use https`;
  if (NOT_AN_APP.has(scheme)) return `'${uri.slice(0, 100)}': the ${scheme} scheme is no app's redirect URI`;
  return null; // a private-use scheme: the native app that claims it receives the code
}

/** The first refusal among `uris`, or null when every one may be registered. */
export const redirectUrisRefusal = (uris: readonly string[]): string | null =>
  uris.map(redirectUriRefusal).find((why) => why !== null) ?? null;
