/**
 * Glob patterns of policy rules: `*` any run of characters, `?` one character; anchored and
 * case-sensitive. Compiled once per policy version into the cheapest test that does the job.
 */
export type Matcher = (value: string) => boolean;

export function compileGlob(pattern: string): Matcher {
  if (pattern === '*') return () => true;
  if (!/[*?]/.test(pattern)) return (value) => value === pattern;
  const star = pattern.indexOf('*');
  if (star === pattern.length - 1 && !pattern.includes('?')) {
    const prefix = pattern.slice(0, -1);
    return (value) => value.startsWith(prefix);
  }
  const source = pattern
    .split('')
    .map((ch) => (ch === '*' ? '.*' : ch === '?' ? '.' : ch.replace(/[.+^${}()|[\]\\/-]/g, '\\$&')))
    .join('');
  const regex = new RegExp(`^${source}$`, 's');
  return (value) => regex.test(value);
}

/** Any of the patterns. */
export function compileGlobs(patterns: readonly string[]): Matcher {
  const matchers = patterns.map(compileGlob);
  return matchers.length === 1 ? (matchers[0] as Matcher) : (value) => matchers.some((m) => m(value));
}
