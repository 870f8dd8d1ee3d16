import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { normaliseResourceUri, ResourceUriError } from '../src/features/acts/resource-uri.ts';

const SPECIAL = /^(https?|wss?|ftp|file):/;

describe('normaliseResourceUri', () => {
  it.each([
    // case: scheme and host
    ['FILE:///secret.txt', 'file:///secret.txt'],
    ['HTTPS://Example.COM/A', 'https://example.com/A'],
    ['db://HOST/a/./b', 'db://host/a/b'],
    // RFC 8089: localhost, no authority, rootless
    ['file://localhost/secret.txt', 'file:///secret.txt'],
    ['file://LocalHost/secret.txt', 'file:///secret.txt'],
    ['file:/secret.txt', 'file:///secret.txt'],
    ['file:secret.txt', 'file:///secret.txt'],
    ['file://server/share/x', 'file://server/share/x'],
    // empty segments of file paths
    ['file:////secret.txt', 'file:///secret.txt'],
    ['file:///public//../secret.txt', 'file:///secret.txt'],
    // percent-encoding
    ['file:///%73ecret.txt', 'file:///secret.txt'],
    ['file:///a%7e%2d', 'file:///a~-'],
    ['file:///a%c3%a9', 'file:///a%C3%A9'],
    ['file:///é b', 'file:///%C3%A9%20b'],
    ['test://x/%7b%7D', 'test://x/%7B%7D'],
    // dot segments, also encoded
    ['file:///./secret.txt', 'file:///secret.txt'],
    ['file:///public/../secret.txt', 'file:///secret.txt'],
    ['file:///../../secret.txt', 'file:///secret.txt'],
    ['file:///%2e%2E/secret.txt', 'file:///secret.txt'],
    ['file:///x/.%2e/secret.txt', 'file:///secret.txt'],
    ['file:///a/b/.', 'file:///a/b/'],
    ['file:///a/b/..', 'file:///a/'],
    ['mem:/a/../b', 'mem:/b'],
    // ports
    ['http://example.com:80/x', 'http://example.com/x'],
    ['https://example.com:443', 'https://example.com/'],
    ['http://example.com:/x', 'http://example.com/x'],
    ['http://example.com:8080/x', 'http://example.com:8080/x'],
    ['http://[::1]:80/x', 'http://[::1]/x'],
    ['http://%41%2d.example/', 'http://a-.example/'],
    ['db://host:0080/x', 'db://host:80/x'],
    // query and fragment: encoding normalised, separators are data there
    ['https://a.example/x?p=%2f%5c&q=%7e#%2F', 'https://a.example/x?p=%2F%5C&q=~#%2F'],
    ['file:///x?a/../b', 'file:///x?a/../b'],
    // opaque URIs: scheme and encoding only
    ['URN:ISBN:0451450523', 'urn:ISBN:0451450523'],
    ['foo:bar/../x', 'foo:bar/../x'],
    ['foo:%41', 'foo:A'],
    ['test://greeting', 'test://greeting'],
    // hosts as WHATWG URL reads them, in every scheme (issue 46, row 1): IPv4 in any notation,
    // IPv6 compressed, IPv4-mapped IPv6 as IPv4, IDNA, one trailing dot of a name
    ['http://2130706433/x', 'http://127.0.0.1/x'],
    ['http://0x7f000001/x', 'http://127.0.0.1/x'],
    ['http://127.1/x', 'http://127.0.0.1/x'],
    ['http://0177.0.0.1/x', 'http://127.0.0.1/x'],
    ['http://127.0.0.1./x', 'http://127.0.0.1/x'],
    ['http://127.0.0.1%2e/x', 'http://127.0.0.1/x'],
    ['http://%31%32%37.0.0.1/x', 'http://127.0.0.1/x'],
    ['http://[0:0:0:0:0:0:0:1]/x', 'http://[::1]/x'],
    ['http://[0::1]/x', 'http://[::1]/x'],
    ['http://[::ffff:127.0.0.1]/x', 'http://127.0.0.1/x'],
    ['http://[::FFFF:7f00:1]:80/x', 'http://127.0.0.1/x'],
    ['http://LOCALHOST./x', 'http://localhost/x'],
    ['http://bücher.example/', 'http://xn--bcher-kva.example/'],
    ['http://\u24DBocalhost/', 'http://localhost/'],
    ['http://a%21b/', 'http://a!b/'],
    ['db://127.1:5432/x', 'db://127.0.0.1:5432/x'],
    ['file://LOCALHOST./x', 'file:///x'],
  ])('%s → %s', (uri, normal) => {
    expect(normaliseResourceUri(uri)).toBe(normal);
  });

  it.each([
    ['file:///public%2F..%2Fsecret.txt', /encoded separator \(%2F\)/],
    ['file:///public%2f..', /encoded separator \(%2F\)/],
    ['file:///public%5c..', /encoded separator \(%5C\)/],
    ['file:///public\\..\\secret.txt', /backslash/],
    ['file://host%2Fx/', /encoded separator/],
    ['file:///secret.txt%00', /encoded control character \(%00\)/],
    ['file:///a%7f', /encoded control character/],
    ['file:///a?%0a', /encoded control character/],
    ['file:///secret\n.txt', /control character/],
    ['file:///secret\u0085.txt', /control character/],
    ['file:///a%zz', /malformed percent-encoding/],
    ['file:///a%4', /malformed percent-encoding/],
    [' file:///secret.txt', /white space/],
    ['file:///secret.txt ', /white space/],
    ['secret.txt', /no scheme/],
    ['/secret.txt', /no scheme/],
    ['1x:/a', /no scheme/],
    ['http://host:8x/', /port/],
    ['http:///a', /without a host/],
    ['file://host:80/x', /port/],
    ['file://me@host/x', /user information/],
    ['http://a b/', /host/],
    ['http://a<b/', /host/],
    ['http://../', /empty label/],
    ['http://a..b/', /empty label/],
    ['HTTPS:/a', /without a host/],
    ['file:///\ud800', /lone surrogate/],
  ])('refuses %j', (uri, message) => {
    expect(() => normaliseResourceUri(uri)).toThrow(ResourceUriError);
    expect(() => normaliseResourceUri(uri)).toThrow(message);
  });

  it('is idempotent, and its special-scheme forms are what WHATWG URL (the MCP SDK server) resolves them to', () => {
    const part = fc.constantFrom(
      'a',
      'B',
      '.',
      '..',
      '%2e',
      '%2E%2e',
      '%41',
      '%7e',
      '%c3%a9',
      'é',
      ' ',
      '',
      'localhost',
      '~',
      ':',
      '@',
      '!',
    );
    const path = fc.array(part, { maxLength: 6 }).map((segments) => segments.join('/'));
    const uri = fc
      .tuple(
        fc.constantFrom('file', 'FILE', 'http', 'HTTPS', 'db', 'urn'),
        fc.constantFrom('://', ':/', ':', '://localhost/', '://LOCALHOST', '://Host:80/', '://h:443/'),
        path,
        fc.constantFrom('', '?q=%2f', '?a=1&b=%7E', '#frag'),
      )
      .map(([scheme, middle, p, tail]) => `${scheme}${middle}${p}${tail}`);
    fc.assert(
      fc.property(uri, (raw) => {
        let normal: string;
        try {
          normal = normaliseResourceUri(raw);
        } catch (error) {
          if (error instanceof ResourceUriError) return;
          throw error;
        }
        expect(normaliseResourceUri(normal)).toBe(normal);
        if (SPECIAL.test(normal)) expect(new URL(normal).href).toBe(normal);
      }),
      { numRuns: 2000 },
    );
  });
});
