/**
 * Classifies IP addresses for the egress guard: everything that is not a public unicast
 * address is forbidden — loopback, private (RFC 1918), carrier-grade NAT, link-local and
 * cloud metadata, unspecified, multicast, reserved and documentation ranges — including the
 * IPv6 forms that embed an IPv4 address (IPv4-mapped, IPv4-compatible, NAT64, 6to4), whose
 * embedded address is checked instead. Teredo is refused outright (its embedded address is
 * obfuscated).
 */
import { isIPv4, isIPv6 } from 'node:net';

type Range = [bigint, number]; // [network, prefix length]

const v4 = (address: string): bigint => address.split('.').reduce((acc, octet) => (acc << 8n) | BigInt(Number(octet)), 0n);

function v6(address: string): bigint {
  let text = address.toLowerCase();
  const zone = text.indexOf('%');
  if (zone >= 0) text = text.slice(0, zone);
  // A dotted IPv4 tail (::ffff:1.2.3.4) becomes two hextets.
  const dotted = /(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (dotted?.[1]) {
    const n = v4(dotted[1]);
    text = `${text.slice(0, -dotted[1].length)}${(n >> 16n).toString(16)}:${(n & 0xffffn).toString(16)}`;
  }
  const [head = '', tail] = text.split('::');
  const headParts = head ? head.split(':') : [];
  const tailParts = tail === undefined ? [] : tail ? tail.split(':') : [];
  const missing = 8 - headParts.length - tailParts.length;
  const parts = [...headParts, ...Array<string>(tail === undefined ? 0 : missing).fill('0'), ...tailParts];
  return parts.reduce((acc, part) => (acc << 16n) | BigInt(Number.parseInt(part || '0', 16)), 0n);
}

const range4 = (cidr: string): Range => {
  const [net = '', len = '32'] = cidr.split('/');
  return [v4(net), Number(len)];
};
const range6 = (cidr: string): Range => {
  const [net = '', len = '128'] = cidr.split('/');
  return [v6(net), Number(len)];
};

const inRange = (value: bigint, [network, prefix]: Range, bits: number) => {
  const shift = BigInt(bits - prefix);
  return value >> shift === network >> shift;
};

const FORBIDDEN_V4 = [
  '0.0.0.0/8', // "this network", unspecified
  '10.0.0.0/8', // private
  '100.64.0.0/10', // carrier-grade NAT
  '127.0.0.0/8', // loopback
  '169.254.0.0/16', // link-local, cloud metadata (169.254.169.254)
  '172.16.0.0/12', // private
  '192.0.0.0/24', // IETF protocol assignments
  '192.0.2.0/24', // documentation
  '192.88.99.0/24', // 6to4 relay anycast
  '192.168.0.0/16', // private
  '198.18.0.0/15', // benchmarking
  '198.51.100.0/24', // documentation
  '203.0.113.0/24', // documentation
  '224.0.0.0/4', // multicast
  '240.0.0.0/4', // reserved, broadcast
].map(range4);

const FORBIDDEN_V6 = [
  '::/128', // unspecified
  '::1/128', // loopback
  '100::/64', // discard
  '64:ff9b:1::/48', // NAT64 local-use (embedding position varies)
  '2001::/32', // Teredo
  '2001:db8::/32', // documentation
  'fc00::/7', // unique local, incl. fd00:ec2::254 (AWS metadata)
  'fe80::/10', // link-local
  'fec0::/10', // site-local (deprecated)
  'ff00::/8', // multicast
].map(range6);

/** IPv6 forms that carry an IPv4 address: [range, bit offset of the IPv4 inside]. */
const EMBEDDING_V4: Array<[Range, number]> = [
  [range6('::ffff:0:0/96'), 0], // IPv4-mapped
  [range6('::/96'), 0], // IPv4-compatible (deprecated)
  [range6('64:ff9b::/96'), 0], // NAT64 well-known prefix
  [range6('2002::/16'), 80], // 6to4: 2002:AABB:CCDD::/48
];

export interface CidrList {
  v4: Range[];
  v6: Range[];
}

export function parseCidr(entry: string): { family: 4 | 6; range: Range } | null {
  const [address = '', len] = entry.split('/');
  if (isIPv4(address)) {
    const prefix = len === undefined ? 32 : Number(len);
    return Number.isInteger(prefix) && prefix >= 0 && prefix <= 32 ? { family: 4, range: [v4(address), prefix] } : null;
  }
  if (isIPv6(address)) {
    const prefix = len === undefined ? 128 : Number(len);
    return Number.isInteger(prefix) && prefix >= 0 && prefix <= 128 ? { family: 6, range: [v6(address), prefix] } : null;
  }
  return null;
}

export function inCidrList(address: string, list: CidrList): boolean {
  if (isIPv4(address)) return list.v4.some((r) => inRange(v4(address), r, 32));
  if (isIPv6(address)) {
    const value = v6(address);
    if (list.v6.some((r) => inRange(value, r, 128))) return true;
    const embedded = embeddedV4(value);
    return embedded !== null && list.v4.some((r) => inRange(embedded, r, 32));
  }
  return false;
}

function embeddedV4(value: bigint): bigint | null {
  for (const [range, offset] of EMBEDDING_V4) {
    if (inRange(value, range, 128)) return (value >> BigInt(offset)) & 0xffffffffn;
  }
  return null;
}

/** Why an address may not be reached, or null when it is a public unicast address. */
export function forbiddenReason(address: string): string | null {
  if (isIPv4(address)) {
    return FORBIDDEN_V4.some((r) => inRange(v4(address), r, 32)) ? `${address} is not a public address` : null;
  }
  if (isIPv6(address)) {
    const value = v6(address);
    const embedded = embeddedV4(value);
    if (embedded !== null) {
      // Checked as the IPv4 address it carries (::ffff:127.0.0.1 is loopback); the
      // IPv4-compatible range also holds :: and ::1, refused above all.
      if (value <= 1n) return `${address} is not a public address`;
      return FORBIDDEN_V4.some((r) => inRange(embedded, r, 32)) ? `${address} embeds a non-public IPv4 address` : null;
    }
    return FORBIDDEN_V6.some((r) => inRange(value, r, 128)) ? `${address} is not a public address` : null;
  }
  return `${address} is not an IP address`;
}
