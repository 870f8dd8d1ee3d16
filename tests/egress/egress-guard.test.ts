/**
 * The egress guard, in-process. Every forbidden target of the corpus is checked with
 * checkUrl, which never connects; only loopback targets are ever really dialled (through
 * guard.fetch, with a loopback listener that must see no connection when refused).
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createEgressGuard, EgressDenied, type EgressGuard, findEgressDenied, InvalidTarget } from '../../apps/server/src/egress/guard.ts';

interface Listener {
  server: Server;
  port: number;
  connections: () => number;
  requests: () => string[];
}

/** A loopback HTTP listener that counts TCP connections and records request paths. */
async function listen(host: string): Promise<Listener | null> {
  let connections = 0;
  const requests: string[] = [];
  const server = createServer((req, res) => {
    requests.push(req.url ?? '');
    if (req.url === '/redirect') {
      res
        .writeHead(302, { location: `http://${host.includes(':') ? `[${host}]` : host}:${(server.address() as AddressInfo).port}/landed` })
        .end();
      return;
    }
    res.writeHead(200, { 'content-type': 'text/plain' }).end('reached');
  });
  server.on('connection', () => {
    connections += 1;
  });
  const ok = await new Promise<boolean>((resolve) => {
    server.once('error', () => resolve(false));
    server.listen(0, host, () => resolve(true));
  });
  if (!ok) return null;
  return { server, port: (server.address() as AddressInfo).port, connections: () => connections, requests: () => [...requests] };
}

async function stop(listener: Listener | null): Promise<void> {
  if (!listener) return;
  listener.server.closeAllConnections();
  await new Promise<void>((resolve) => listener.server.close(() => resolve()));
}

/** What guard.fetch threw or rejected with (it may throw synchronously for IP literals). */
async function fetchError(guard: EgressGuard, url: string): Promise<unknown> {
  try {
    const res = await guard.fetch(url);
    await res.body?.cancel();
  } catch (error) {
    return error;
  }
  return null;
}

const guards: EgressGuard[] = [];
const guardOf = (allowlist: string[]) => {
  const guard = createEgressGuard(allowlist, { connectTimeoutMs: 2_000 });
  guards.push(guard);
  return guard;
};

let v4: Listener;
let v6: Listener | null;
beforeAll(async () => {
  v4 = (await listen('127.0.0.1')) as Listener;
  v6 = await listen('::1');
});
afterAll(async () => {
  for (const guard of guards) await guard.close().catch(() => undefined);
  await stop(v4);
  await stop(v6);
});

// Hosts only: each becomes http://<host>/ and https://<host>:8443/x, checked without connecting.
const FORBIDDEN: Array<[string, string]> = [
  // loopback, in every encoding
  ['loopback', '127.0.0.1'],
  ['loopback short form', '127.1'],
  ['loopback three-part form', '127.0.1'],
  ['loopback hex integer', '0x7f000001'],
  ['loopback hex octet', '0x7f.0.0.1'],
  ['loopback octal integer', '017700000001'],
  ['loopback octal octet', '0177.0.0.1'],
  ['loopback decimal integer', '2130706433'],
  ['loopback top of 127/8', '127.255.255.254'],
  ['loopback 127.53.0.1', '127.53.0.1'],
  ['IPv6 loopback', '[::1]'],
  ['IPv6 loopback, uncompressed', '[0:0:0:0:0:0:0:1]'],
  ['IPv4-mapped loopback, dotted', '[::ffff:127.0.0.1]'],
  ['IPv4-mapped loopback, hex', '[::ffff:7f00:1]'],
  ['NAT64 loopback', '[64:ff9b::7f00:1]'],
  ['NAT64 loopback, dotted', '[64:ff9b::127.0.0.1]'],
  ['6to4 loopback', '[2002:7f00:1::]'],
  ['IPv4-compatible loopback', '[::127.0.0.1]'],
  // unspecified
  ['unspecified 0.0.0.0', '0.0.0.0'],
  ['unspecified 0', '0'],
  ['this-network 0.1.2.3', '0.1.2.3'],
  ['IPv6 unspecified', '[::]'],
  // RFC 1918
  ['private 10.0.0.1', '10.0.0.1'],
  ['private 10.255.255.255', '10.255.255.255'],
  ['private 10/8 as integer', '167772161'],
  ['private 172.16.0.1', '172.16.0.1'],
  ['private 172.20.10.5', '172.20.10.5'],
  ['private 172.31.255.255', '172.31.255.255'],
  ['private 192.168.0.1', '192.168.0.1'],
  ['private 192.168.255.254', '192.168.255.254'],
  ['private 192.168 in hex', '0xc0.0xa8.0x1.0x1'],
  // carrier-grade NAT
  ['CGNAT 100.64.0.1', '100.64.0.1'],
  ['CGNAT 100.100.100.200', '100.100.100.200'],
  ['CGNAT 100.127.255.254', '100.127.255.254'],
  // link-local and cloud metadata
  ['link-local 169.254.0.1', '169.254.0.1'],
  ['metadata 169.254.169.254', '169.254.169.254'],
  ['metadata as hex integer', '0xa9fea9fe'],
  ['metadata as decimal integer', '2852039166'],
  ['metadata as octal octets', '0251.0376.0251.0376'],
  ['metadata IPv4-mapped', '[::ffff:169.254.169.254]'],
  ['AWS IPv6 metadata fd00:ec2::254', '[fd00:ec2::254]'],
  ['unique local fc00::1', '[fc00::1]'],
  ['unique local fdff::1', '[fdff:ffff::1]'],
  ['IPv6 link-local fe80::1', '[fe80::1]'],
  ['IPv6 link-local febf::1', '[febf::1]'],
  ['IPv6 site-local fec0::1', '[fec0::1]'],
  // multicast, reserved, broadcast
  ['multicast 224.0.0.1', '224.0.0.1'],
  ['multicast 239.255.255.250', '239.255.255.250'],
  ['IPv6 multicast ff02::1', '[ff02::1]'],
  ['reserved 240.0.0.1', '240.0.0.1'],
  ['broadcast 255.255.255.255', '255.255.255.255'],
  // documentation and benchmarking ranges
  ['documentation 192.0.2.1', '192.0.2.1'],
  ['documentation 198.51.100.7', '198.51.100.7'],
  ['documentation 203.0.113.9', '203.0.113.9'],
  ['IPv6 documentation 2001:db8::1', '[2001:db8::1]'],
  ['benchmarking 198.18.0.1', '198.18.0.1'],
  ['IETF protocol assignments 192.0.0.1', '192.0.0.1'],
  // IPv4-mapped, NAT64 and 6to4 forms of private addresses
  ['IPv4-mapped 10.0.0.1', '[::ffff:10.0.0.1]'],
  ['IPv4-mapped 192.168.1.1', '[::ffff:c0a8:101]'],
  ['IPv4-mapped 172.16.0.1', '[::ffff:172.16.0.1]'],
  ['IPv4-mapped 100.64.0.1', '[::ffff:100.64.0.1]'],
  ['IPv4-mapped unspecified', '[::ffff:0.0.0.0]'],
  ['NAT64 10.0.0.1', '[64:ff9b::a00:1]'],
  ['NAT64 metadata', '[64:ff9b::169.254.169.254]'],
  ['NAT64 192.168.0.1', '[64:ff9b::c0a8:1]'],
  ['6to4 10.0.0.1', '[2002:a00:1::]'],
  ['6to4 192.168.1.1', '[2002:c0a8:101::1]'],
  ['6to4 metadata', '[2002:a9fe:a9fe::]'],
  ['NAT64 local-use prefix', '[64:ff9b:1::a00:1]'],
  ['Teredo', '[2001:0:4136:e378:8000:63bf:3fff:fdd2]'],
];

describe('createEgressGuard().checkUrl (forbidden targets)', () => {
  const guard = createEgressGuard([]);
  guards.push(guard);

  it('holds a corpus of at least 60 forbidden targets', () => {
    expect(FORBIDDEN.length).toBeGreaterThanOrEqual(60);
    expect(new Set(FORBIDDEN.map(([, host]) => host)).size).toBe(FORBIDDEN.length);
  });

  it.each(FORBIDDEN)('refuses %s (%s) over http and https, on any port', (_label, host) => {
    for (const url of [`http://${host}/`, `https://${host}:8443/x?y=1`, `HTTP://${host}:80/`]) {
      expect(() => guard.checkUrl(url), url).toThrow(EgressDenied);
    }
  });

  it.each([
    ['ftp:', 'ftp://example.com/file'],
    ['file:', 'file:///etc/passwd'],
    ['gopher:', 'gopher://example.com:70/_GET'],
    ['javascript:', 'javascript:alert(1)'],
    ['data:', 'data:text/plain,hello'],
    ['ws:', 'ws://example.com/socket'],
    ['credentials in the URL', 'http://user:secret@example.com/'],
    ['a user name alone in the URL', 'https://user@example.com/'],
    ['a relative URL', '/relative/path'],
    ['not a URL', 'not a url'],
  ])('refuses %s with InvalidTarget', (_label, url) => {
    expect(() => guard.checkUrl(url)).toThrow(InvalidTarget);
  });

  it('refuses a forbidden target with https required too, and keeps refusing http for public hosts', () => {
    expect(() => guard.checkUrl('https://10.0.0.1/', { httpsOnly: true })).toThrow(EgressDenied);
    expect(() => guard.checkUrl('http://example.com/', { httpsOnly: true })).toThrow(EgressDenied);
    expect(() => guard.checkUrl('http://8.8.8.8/', { httpsOnly: true })).toThrow(EgressDenied);
    expect(guard.checkUrl('https://example.com/hook', { httpsOnly: true }).hostname).toBe('example.com');
  });
});

describe('createEgressGuard().checkUrl (public targets)', () => {
  const guard = createEgressGuard([]);
  guards.push(guard);

  it.each([
    ['8.8.8.8', 'http://8.8.8.8/'],
    ['1.1.1.1 on a port', 'https://1.1.1.1:8443/dns-query'],
    ['[2606:4700:4700::1111]', 'https://[2606:4700:4700::1111]/'],
    ['IPv4-mapped public address', 'http://[::ffff:8.8.8.8]/'],
    ['NAT64 form of a public address', 'http://[64:ff9b::808:808]/'],
    ['6to4 form of a public address', 'http://[2002:808:808::1]/'],
    ['example.com', 'https://example.com/path?q=1'],
    ['172.32.0.1, just outside 172.16/12', 'http://172.32.0.1/'],
    ['100.128.0.1, just outside 100.64/10', 'http://100.128.0.1/'],
  ])('passes %s (checkUrl makes no request)', (_label, url) => {
    const parsed = guard.checkUrl(url);
    expect(parsed).toBeInstanceOf(URL);
    expect(parsed.href).toBe(new URL(url).href);
  });

  it('passes a host name without resolving it (the DNS check happens when connecting)', () => {
    expect(guard.checkUrl('http://localhost/').hostname).toBe('localhost');
  });
});

describe('createEgressGuard().fetch (the connection path)', () => {
  it.each([
    '127.0.0.1',
    '127.1',
    '127.0.1',
    '0x7f000001',
    '0x7f.0.0.1',
    '017700000001',
    '0177.0.0.1',
    '2130706433',
    '[::ffff:127.0.0.1]',
    '[::ffff:7f00:1]',
  ])('refuses http://%s:<port>/ before any byte is sent', async (host) => {
    const guard = guardOf([]);
    const before = v4.connections();
    const error = await fetchError(guard, `http://${host}:${v4.port}/`);
    expect(error).toBeInstanceOf(EgressDenied);
    expect(v4.connections()).toBe(before);
  });

  it.for(['[::1]', '[0:0:0:0:0:0:0:1]'])('refuses http://%s:<port>/ before any byte is sent', async (host, { skip }) => {
    if (!v6) skip('::1 is not available here');
    const listener = v6 as Listener;
    const guard = guardOf([]);
    const before = listener.connections();
    const error = await fetchError(guard, `http://${host}:${listener.port}/`);
    expect(error).toBeInstanceOf(EgressDenied);
    expect(listener.connections()).toBe(before);
  });

  it('refuses localhost after DNS resolution, on the connection path, with no connection made', async () => {
    const guard = guardOf([]);
    const before = v4.connections();
    const error = await fetchError(guard, `http://localhost:${v4.port}/`);
    expect(error).not.toBeNull();
    expect(findEgressDenied(error)).toBeInstanceOf(EgressDenied);
    expect(v4.connections()).toBe(before);
    expect(v4.requests()).toEqual([]);
  });

  it.each(['LocalHost', 'localhost.', 'LOCALHOST.'])('refuses %s on the connection path, with no connection made', async (host) => {
    const guard = guardOf([]);
    const before = v4.connections();
    const error = await fetchError(guard, `http://${host}:${v4.port}/`);
    // Refused by the guard after resolution, or not resolvable at all: never connected.
    expect(error).not.toBeNull();
    expect(v4.connections()).toBe(before);
  });

  it('lets 127.0.0.1 and localhost through with a 127.0.0.1/32 allowlist entry', async () => {
    const guard = guardOf(['127.0.0.1/32']);
    const before = v4.requests().length;
    const direct = await guard.fetch(`http://127.0.0.1:${v4.port}/direct`);
    expect(direct.status).toBe(200);
    expect(await direct.text()).toBe('reached');
    const named = await guard.fetch(`http://localhost:${v4.port}/named`);
    expect(named.status).toBe(200);
    await named.body?.cancel();
    expect(v4.requests().slice(before)).toEqual(['/direct', '/named']);
  });

  it("lets localhost through with 'localhost' as a host entry, but not the bare 127.0.0.1 literal", async () => {
    const guard = guardOf(['localhost']);
    const res = await guard.fetch(`http://localhost:${v4.port}/by-name`);
    expect(res.status).toBe(200);
    await res.body?.cancel();
    const before = v4.connections();
    expect(await fetchError(guard, `http://127.0.0.1:${v4.port}/by-ip`)).toBeInstanceOf(EgressDenied);
    expect(v4.connections()).toBe(before);
  });

  it('allows only what the allowlist names: other forbidden ranges stay refused', () => {
    const guard = guardOf(['127.0.0.1/32', '::1/128', 'localhost']);
    for (const url of [
      'http://127.0.0.2/',
      'http://10.0.0.1/',
      'http://169.254.169.254/',
      'http://[fd00:ec2::254]/',
      'http://[::2]/',
      'http://192.168.1.1/',
    ]) {
      expect(() => guard.checkUrl(url), url).toThrow(EgressDenied);
    }
    expect(guard.checkUrl('http://[::ffff:127.0.0.1]/').hostname).toBe('[::ffff:7f00:1]');
    expect(guard.checkUrl('http://[::1]:9/').hostname).toBe('[::1]');
  });

  it('matches a *.domain entry on whole labels only', () => {
    const guard = guardOf(['*.example.com']);
    expect(guard.checkUrl('http://api.example.com/', { httpsOnly: true }).hostname).toBe('api.example.com');
    expect(guard.checkUrl('http://a.b.example.com/', { httpsOnly: true }).hostname).toBe('a.b.example.com');
    expect(() => guard.checkUrl('http://evilexample.com/', { httpsOnly: true })).toThrow(EgressDenied);
    expect(() => guard.checkUrl('http://example.com.evil.net/', { httpsOnly: true })).toThrow(EgressDenied);
  });

  it('lets allow-listed targets use plain http even where https is required', () => {
    const guard = guardOf(['127.0.0.1/32', 'localhost']);
    expect(guard.checkUrl('http://127.0.0.1:9/', { httpsOnly: true }).hostname).toBe('127.0.0.1');
    expect(guard.checkUrl('http://localhost:9/', { httpsOnly: true }).hostname).toBe('localhost');
  });

  it('never follows a redirect: the 3xx comes back and only one request is made', async () => {
    const guard = guardOf(['127.0.0.1/32']);
    const before = v4.requests().length;
    const res = await guard.fetch(`http://127.0.0.1:${v4.port}/redirect`);
    expect(res.status).toBe(302);
    expect(res.headers.get('location')).toBe(`http://127.0.0.1:${v4.port}/landed`);
    await res.body?.cancel();
    expect(v4.requests().slice(before)).toEqual(['/redirect']);
  });

  it('refuses non-http schemes and credentials on fetch too', async () => {
    const guard = guardOf(['127.0.0.1/32']);
    expect(await fetchError(guard, 'file:///etc/passwd')).toBeInstanceOf(InvalidTarget);
    const before = v4.connections();
    expect(await fetchError(guard, `http://user:pw@127.0.0.1:${v4.port}/`)).toBeInstanceOf(InvalidTarget);
    expect(v4.connections()).toBe(before);
  });
});
