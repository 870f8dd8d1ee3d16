/**
 * The one egress guard for every outbound request Warden makes (HTTP proxy, MCP proxy,
 * webhooks). A target passes only if:
 * - its scheme is http or https (https only where the caller demands it, e.g. webhooks,
 *   except for allow-listed targets);
 * - an IP literal in the URL is a public address (checked here: no DNS lookup happens for
 *   it, so the lookup hook below never sees it);
 * - every address its host name resolves to is public — checked inside the connection's own
 *   DNS lookup, on the addresses the socket then connects to, so a name that resolves to a
 *   public address when checked and to a private one when connecting (DNS rebinding) cannot
 *   pass.
 * Redirects are never followed here: each response, 3xx included, goes back to the caller.
 * WARDEN_EGRESS_ALLOWLIST lets operators allow host names (`host`, `*.domain`) and CIDRs.
 */
import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import { isIP } from 'node:net';
import { Agent, type Dispatcher, fetch as undiciFetch } from 'undici';
import { type CidrList, forbiddenReason, inCidrList, parseCidr } from './ip.ts';

export class EgressDenied extends Error {
  override readonly name = 'EgressDenied';
}

export class InvalidTarget extends Error {
  override readonly name = 'InvalidTarget';
}

export interface EgressGuard {
  /** Parses and checks a target URL; throws InvalidTarget or EgressDenied. */
  checkUrl(url: string, options?: { httpsOnly?: boolean }): URL;
  /** The dispatcher whose connections re-check resolved addresses. */
  readonly dispatcher: Dispatcher;
  /** fetch through the guard, never following redirects. */
  fetch(input: string | URL, init?: RequestInit): Promise<Response>;
  close(): Promise<void>;
}

/** The EgressDenied behind an error, however deeply a client library wrapped it. */
export function findEgressDenied(error: unknown): EgressDenied | null {
  for (let e: unknown = error, depth = 0; e && depth < 8; e = (e as { cause?: unknown }).cause, depth++) {
    if (e instanceof EgressDenied) return e;
  }
  return null;
}

/** A failed outbound request in a few words: its error code, else its message. */
export function describeNetworkError(error: unknown): string {
  const e = error as { code?: string; message?: string; cause?: { code?: string; message?: string } };
  return e.code ?? e.cause?.code ?? e.message ?? 'unknown error';
}

/** The end of a refusal that an operator can lift: the variable and the entry to add. */
const allowHint = (entry: string) => ` (an operator can allow it: add ${entry} to WARDEN_EGRESS_ALLOWLIST)`;

export function createEgressGuard(allowlist: readonly string[], options: { connectTimeoutMs?: number } = {}): EgressGuard {
  const cidrs: CidrList = { v4: [], v6: [] };
  const hosts = new Set<string>();
  const domains: string[] = [];
  for (const entry of allowlist.map((e) => e.trim().toLowerCase()).filter(Boolean)) {
    const cidr = parseCidr(entry);
    if (cidr) cidrs[cidr.family === 4 ? 'v4' : 'v6'].push(cidr.range);
    else if (entry.startsWith('*.')) domains.push(entry.slice(1));
    else hosts.add(entry);
  }
  const hostAllowed = (host: string) => hosts.has(host) || domains.some((suffix) => host.endsWith(suffix));

  /** `allow`: the WARDEN_EGRESS_ALLOWLIST entry that would let the target through, named so an operator knows the fix. */
  const checkAddress = (address: string, allow = isIP(address) === 6 ? `${address}/128` : `${address}/32`) => {
    if (inCidrList(address, cidrs)) return;
    const reason = forbiddenReason(address);
    if (reason) throw new EgressDenied(`target denied: ${reason}${allowHint(allow)}`);
  };

  const lookup = (hostname: string, opts: { all?: boolean; family?: number }, callback: (...args: unknown[]) => void) => {
    dnsLookup(hostname, { ...opts, all: true }, (error, addresses: LookupAddress[]) => {
      if (error) return callback(error);
      try {
        if (!hostAllowed(hostname.toLowerCase())) for (const { address } of addresses) checkAddress(address, hostname.toLowerCase());
      } catch (denied) {
        return callback(denied);
      }
      if (opts.all) return callback(null, addresses);
      const first = addresses[0];
      if (!first) return callback(new EgressDenied(`target denied: ${hostname} resolves to no address`));
      callback(null, first.address, first.family);
    });
  };

  // allowH2 false: undici 8 would speak HTTP/2 to a TLS upstream that offers it; the proxies
  // and webhooks were built and tested on HTTP/1.1 (docs/decisions/0015-node-24-toolchain.md).
  const dispatcher = new Agent({ allowH2: false, connect: { lookup: lookup as never, timeout: options.connectTimeoutMs ?? 5_000 } });

  const checkUrl = (raw: string, { httpsOnly = false } = {}): URL => {
    let url: URL;
    try {
      url = new URL(raw);
    } catch {
      throw new InvalidTarget('not an absolute URL');
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new InvalidTarget(`scheme ${url.protocol} is not http or https`);
    if (url.username || url.password) throw new InvalidTarget('credentials in the URL are not accepted; send them in headers');
    // WHATWG parsing already turned 127.1, 0x7f000001, 017700000001 and 2130706433 into 127.0.0.1.
    const host = url.hostname.replace(/^\[(.*)\]$/, '$1').toLowerCase();
    const ipLiteral = isIP(host) !== 0;
    const allowed = ipLiteral ? inCidrList(host, cidrs) : hostAllowed(host);
    if (httpsOnly && url.protocol !== 'https:' && !allowed) throw new EgressDenied(`target denied: https is required${allowHint(host)}`);
    if (ipLiteral && !allowed) checkAddress(host);
    return url;
  };

  return {
    checkUrl,
    dispatcher,
    fetch: (input, init) => {
      const url = checkUrl(String(input));
      return undiciFetch(url, { ...(init as object), redirect: 'manual', dispatcher }) as unknown as Promise<Response>;
    },
    close: () => dispatcher.close(),
  };
}
