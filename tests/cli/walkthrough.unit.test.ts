/** How the README walk-through test reads the README (tests/support/walkthrough.ts): it must fail when an output drifts. */
import { describe, expect, it } from 'vitest';
import { matchShown, stepsOf, withKnown } from '../support/walkthrough.ts';

describe('stepsOf', () => {
  it('reads commands (continued lines, quoted bodies), wrapped outputs, "again" and shown files', () => {
    const steps = stepsOf(
      [
        'KEY=k',
        "curl -s -X POST $API/p -d '{",
        '  "name": "x"}\'',
        '# {"data":{"id":"1",',
        '#  "name":"x"}}',
        '',
        'curl -s $API/a \\',
        '  -H "x: y"',
        '# line one',
        '# line two',
        '# the same request again:',
        '# {"error":{}}',
        'curl -s $API/k > key.json',
        '# key.json: {"data":1}',
      ].join('\n'),
    );
    expect(steps).toEqual([
      { command: 'KEY=k', shown: null },
      { command: 'curl -s -X POST $API/p -d \'{\n  "name": "x"}\'', shown: '{"data":{"id":"1","name":"x"}}' },
      { command: 'curl -s $API/a \\\n  -H "x: y"', shown: 'line one\nline two' },
      { command: null, shown: '{"error":{}}' },
      { command: 'curl -s $API/k > key.json', shown: '{"data":1}', file: 'key.json' },
    ]);
  });
});

describe('matchShown', () => {
  const shown = '{"id":"8bd26fb8-de66-4173-9441-9fe73cfad062","sequence":9,…,"hash":"3dd8eda1…","key":"wak_3f9a1c0b7d2e4f68_Jr8y…"}';
  const actual = (sequence: number, extra = '') =>
    `{"id":"e5c9fc6a-6e58-493e-8a16-83625989694a","sequence":${sequence},"event_timestamp":"x",${extra}"hash":"91c40da5fc5776","key":"wak_0011223344556677_Zz9q-_x"}`;

  it('takes ids, hashes and the start of secrets as any, and remembers the ids it saw', () => {
    const known = new Map<string, string>();
    expect(matchShown(shown, actual(9), known)).toBe(true);
    expect(known.get('8bd26fb8-de66-4173-9441-9fe73cfad062')).toBe('e5c9fc6a-6e58-493e-8a16-83625989694a');
    expect(withKnown('APPROVAL=8bd26fb8-de66-4173-9441-9fe73cfad062', known)).toBe('APPROVAL=e5c9fc6a-6e58-493e-8a16-83625989694a');
  });

  it('fails on a count that drifted, a field that is gone, or another id where the same one is shown', () => {
    expect(matchShown(shown, actual(10), new Map())).toBe(false);
    expect(matchShown(shown, actual(9).replace('"sequence":9,', ''), new Map())).toBe(false);
    expect(
      matchShown(
        '{"a":"8bd26fb8-de66-4173-9441-9fe73cfad062","b":"8bd26fb8-de66-4173-9441-9fe73cfad062"}',
        '{"a":"e5c9fc6a-6e58-493e-8a16-83625989694a","b":"e5c9fc6a-6e58-493e-8a16-83625989694b"}',
        new Map(),
      ),
    ).toBe(false);
    const known = new Map([['8bd26fb8-de66-4173-9441-9fe73cfad062', 'e5c9fc6a-6e58-493e-8a16-83625989694a']]);
    expect(
      matchShown(shown, actual(9).replace('e5c9fc6a-6e58-493e-8a16-83625989694a', '00000000-6e58-493e-8a16-83625989694a'), known),
    ).toBe(false);
  });

  it('matches the whole output, not a part of it', () => {
    expect(matchShown('{"data":1}', '{"data":1}\n', new Map())).toBe(true);
    expect(matchShown('{"data":1}', '{"data":1} and more', new Map())).toBe(false);
    expect(matchShown('checked: 9', 'checked: 90', new Map())).toBe(false);
  });
});
