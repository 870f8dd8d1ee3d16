/**
 * The families of issue 46, rows 1 and 7, fuzzed: whatever spelling is generated, what WHATWG
 * URL reads as a blocked host is decided as that host, what a case-folding or double-decoding
 * upstream reads as a blocked path is blocked, and what PHP reads as `_method` is refused.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { httpFacts } from '../src/features/acts/act.ts';
import { normaliseResourceUri, ResourceUriError } from '../src/features/acts/resource-uri.ts';
import { type AgentFacts, compilePolicySet, decide } from '../src/features/policies/engine.ts';

const RUNS = Number(process.env.FUZZ_RUNS ?? 1000);

/** One IPv4 part in decimal, hex or octal (as the WHATWG IPv4 parser reads each). */
const part = (value: number) =>
  fc.constantFrom(String(value), `0x${value.toString(16)}`, `0X${value.toString(16).toUpperCase()}`, `0${value.toString(8)}`);

/** An IPv4 address spelled with 1 to 4 parts in mixed notations, maybe a trailing dot, maybe its dots percent-encoded. */
const ipv4Spelling = fc
  .tuple(fc.integer({ min: 0, max: 0xffffffff }), fc.integer({ min: 1, max: 4 }), fc.boolean(), fc.boolean())
  .chain(([address, parts, trailingDot, encodeDots]) => {
    const bytes = [address >>> 24, (address >>> 16) & 255, (address >>> 8) & 255, address & 255];
    // the last part holds the remaining bytes, as `127.1` holds `0.0.1`
    const values = [...bytes.slice(0, parts - 1), bytes.slice(parts - 1).reduce((sum, b) => sum * 256 + b, 0)];
    return fc.tuple(...values.map(part)).map((spelled) => {
      const dot = encodeDots ? '%2E' : '.';
      return { address: bytes.join('.'), host: spelled.join(dot) + (trailingDot ? '.' : '') };
    });
  });

/** An IPv6 address with zero runs written in full, compressed or half-compressed, in either case. */
const ipv6Spelling = fc
  .tuple(fc.array(fc.integer({ min: 0, max: 0xffff }), { minLength: 8, maxLength: 8 }), fc.boolean(), fc.boolean())
  .map(([groups, padded, upper]) => {
    const text = groups.map((g) => (padded ? g.toString(16).padStart(4, '0') : g.toString(16))).join(':');
    return { canonical: new URL(`http://[${text}]/`).hostname, host: `[${upper ? text.toUpperCase() : text}]` };
  });

describe('resource URIs: a host in any spelling is decided as WHATWG URL reads it (row 1)', () => {
  it('IPv4 in decimal, hex, octal, short forms, trailing dots and encoded dots', () => {
    fc.assert(
      fc.property(ipv4Spelling, fc.constantFrom('http', 'https', 'ws', 'db'), ({ address, host }, scheme) => {
        const normal = normaliseResourceUri(`${scheme}://${host}/x`);
        // the host an upstream connects to, by WHATWG URL, is the host decided on
        expect(normal).toBe(`${scheme}://${address}/x`);
        expect(new URL(`http://${host}/`).hostname).toBe(address);
      }),
      { numRuns: RUNS },
    );
  });

  it('IPv6 in full, compressed or mixed case', () => {
    fc.assert(
      fc.property(ipv6Spelling, ({ canonical, host }) => {
        const normal = normaliseResourceUri(`http://${host}/x`);
        const mapped = /^\[::ffff:([0-9a-f]+):([0-9a-f]+)\]$/.exec(canonical);
        if (mapped) expect(normal).toMatch(/^http:\/\/\d+\.\d+\.\d+\.\d+\/x$/);
        else expect(normal).toBe(`http://${canonical}/x`);
      }),
      { numRuns: RUNS },
    );
  });
});

const agent: AgentFacts = {
  id: 'a',
  slug: 'bot',
  name: 'Bot',
  status: 'active',
  environment: 'development',
  risk_level: null,
  allowed_tools: [],
  allowed_resources: [],
};

/** A path's characters each in either case and percent-encoded zero to three times (`a`, `%61`, `%2561`, `%252561`). */
const pathSpelling = (path: string) =>
  fc
    .tuple(
      ...[...path].map((char) => fc.tuple(fc.boolean(), fc.integer({ min: 0, max: 3 })).map(([upper, depth]) => ({ char, upper, depth }))),
    )
    .map((chars) =>
      chars
        .map(({ char, upper, depth }) => {
          let spelled = upper ? char.toUpperCase() : char;
          if (char === '/') return spelled; // an encoded separator is refused outright (http-form.ts)
          for (let i = 0; i < depth; i++) spelled = [...spelled].map((c) => `%${c.charCodeAt(0).toString(16).padStart(2, '0')}`).join('');
          return spelled;
        })
        .join(''),
    );

describe('HTTP paths: a block holds for every spelling a case-folding, decoding upstream reads as the same (row 7)', () => {
  const set = compilePolicySet([
    { name: 'guard', mode: 'enforce', priority: 0, rules: [{ match: { path: ['/admin/*'] }, effect: 'block' }] },
  ]);
  const allowOnly = compilePolicySet(
    [{ name: 'allow', mode: 'enforce', priority: 0, rules: [{ match: { path: ['/admin/*'] }, effect: 'allow' }] }],
    {
      development: 'block',
    },
  );

  it('blocks /admin/users in any case and any depth of encoding; an allow rule lets only the exact form through', () => {
    fc.assert(
      fc.property(pathSpelling('/admin/users'), (path) => {
        let facts: ReturnType<typeof httpFacts>;
        try {
          facts = httpFacts({ mode: 'http_proxy', method: 'GET', url: `https://api.example.com${path}` });
        } catch {
          return; // refused before anything is decided: never sent either
        }
        const input = { action: 'http.request', execution: facts };
        expect(decide(set, input, agent).effect).toBe('block');
        const allowed = decide(allowOnly, input, agent).allowed;
        expect(allowed).toBe(facts.path.startsWith('/admin/'));
      }),
      { numRuns: RUNS },
    );
  });
});

describe('HTTP: `_method` in any spelling PHP reads as one is refused (row 7)', () => {
  // A space as the first character is a leading space to PHP, stripped rather than renamed.
  const rename = fc.constantFrom('_', '.', '[', '%2E', '%5F', '%255F', '%2e', '%5B');
  it('refuses the parameter, whatever the spelling of its first character, case and leading spaces', () => {
    fc.assert(
      fc.property(
        rename,
        fc.constantFrom('', '%20', '+', '%20%20'),
        fc.constantFrom('method', 'METHOD', 'Method', '%6Dethod'),
        (first, lead, rest) => {
          const name = `${lead}${first}${rest}`;
          const url = `https://api.example.com/users/7?a=1&${name}=DELETE`;
          expect(() => httpFacts({ mode: 'http_proxy', method: 'POST', url }), name).toThrow(/_method/);
        },
      ),
      { numRuns: Math.min(RUNS, 500) },
    );
  });

  it('refuses no ordinary parameter', () => {
    for (const name of ['method', 'methods', 'x_method', '_methods', 'a.method'])
      expect(() => httpFacts({ mode: 'http_proxy', method: 'POST', url: `https://api.example.com/?${name}=x` }), name).not.toThrow();
  });
});

it('keeps refusing what has no one form (an empty label, a backslash)', () => {
  for (const uri of ['http://a..b/', 'http://127.0.0.1\\@evil/']) expect(() => normaliseResourceUri(uri)).toThrow(ResourceUriError);
});
