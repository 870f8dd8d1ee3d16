/**
 * Glob patterns of policy rules: `*` any run of characters, `?` one character; anchored and
 * case-sensitive. Compiled once per policy version into the cheapest test that does the job.
 *
 * No regular expressions: a backtracking regex turns a pattern such as `*a*a*a*a*a*a*a*a*a*a*b`
 * into seconds of blocked event loop per value. The matcher below takes the segments between
 * stars left to right at their first fit, which is exact for globs. A segment between two stars
 * is searched in one pass over the value (see finder), so a glob costs in proportion to value
 * length × ceil(longest inner text / 32), plus its own length. Rules' matchers are metered:
 * those searches spend the decision's budget, and limits.ts bounds the number and length of
 * globs (figures: docs/decisions/0010-policy-cost-limits.md).
 */
import { COST, charge } from './limits.ts';

export type Matcher = (value: string) => boolean;

/** A run of the pattern between stars; `?` in it matches any one character. */
interface Segment {
  text: string;
  wild: boolean;
}

const segment = (text: string): Segment => ({ text, wild: text.includes('?') });

const QUESTION = 63; // '?'

/** Whether `seg` matches `value` at `at`. */
function fitsAt(value: string, seg: Segment, at: number): boolean {
  if (at < 0 || at + seg.text.length > value.length) return false;
  if (!seg.wild) return value.startsWith(seg.text, at);
  const text = seg.text;
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if (code !== QUESTION && code !== value.charCodeAt(at + i)) return false;
  }
  return true;
}

/** The first position in [from, end - length] where a middle segment fits, or -1. */
type Finder = (value: string, from: number, end: number) => number;

/**
 * Below this many characters to search, a segment without `?` uses the engine's substring
 * search: fastest on ordinary values, and its worst case (adversarial text, e.g. `aa…ab` in
 * `aaaa…`) is small on short ones.
 */
const SHORT_SEARCH = 256;

/**
 * The finder of a middle segment. A metered one spends the decision's budget (limits.ts) in
 * proportion to the characters it may look at: this is the only part of matching whose cost
 * grows with the value.
 */
function finder(seg: Segment, metered: boolean): Finder {
  const text = seg.text;
  if (text.length === 1 && !seg.wild) {
    // one character: a plain scan, as fast as memchr whatever the value
    const perChar = metered ? 1 / (64 * COST.globScanCharsPerUnit) : 0;
    return (value, from, end) => {
      if (metered) charge((end - from) * perChar);
      const at = value.indexOf(text, from);
      return at >= 0 && at < end ? at : -1;
    };
  }
  // the shift-and tables are built on first use (a policy set is compiled after every change)
  let tables: Finder | undefined;
  const scan: Finder = (value, from, end) => {
    tables ??= shiftAnd(text);
    return tables(value, from, end);
  };
  // charged per character searched: the word operations shift-and needs (never fewer than 2)
  const perChar = metered ? Math.max(Math.ceil(text.length / 32), 2) / COST.globScanCharsPerUnit : 0;
  if (seg.wild) {
    return (value, from, end) => {
      if (metered) charge((end - from) * perChar);
      return scan(value, from, end);
    };
  }
  return (value, from, end) => {
    if (metered) charge((end - from) * perChar);
    if (end - from > SHORT_SEARCH) return scan(value, from, end);
    const at = value.indexOf(text, from);
    return at >= 0 && at + text.length <= end ? at : -1;
  };
}

/**
 * Shift-and (bit-parallel) search for a segment, `?` matching any one UTF-16 code unit: bit i
 * of the state says whether segment[0..i] matches the value ending at the current character.
 * One pass over the value, ceil(length / 32) word operations per character, whatever the text.
 */
function shiftAnd(text: string): Finder {
  const length = text.length;
  const words = Math.ceil(length / 32);
  // Masks per character: bit i set when text[i] is that character or `?`. ASCII in a flat
  // table (128 × words), other code units in a map; `any` for characters the text does not name.
  const any = new Uint32Array(words);
  for (let i = 0; i < length; i++) if (text[i] === '?') any[i >>> 5] = (any[i >>> 5] as number) | (1 << (i & 31));
  const ascii = new Uint32Array(128 * words);
  for (let code = 0; code < 128; code++) ascii.set(any, code * words);
  const other = new Map<number, Uint32Array>();
  for (let i = 0; i < length; i++) {
    if (text[i] === '?') continue;
    const code = text.charCodeAt(i);
    const bit = 1 << (i & 31);
    const word = i >>> 5;
    if (code < 128) ascii[code * words + word] = (ascii[code * words + word] as number) | bit;
    else {
      let mask = other.get(code);
      if (!mask) {
        mask = Uint32Array.from(any);
        other.set(code, mask);
      }
      mask[word] = (mask[word] as number) | bit;
    }
  }
  const last = 1 << ((length - 1) & 31);
  if (words === 1) {
    const anyMask = any[0] as number;
    const otherMask = new Map([...other].map(([code, mask]) => [code, mask[0] as number]));
    return (value, from, end) => {
      let state = 0;
      for (let j = from; j < end; j++) {
        const code = value.charCodeAt(j);
        state = ((state << 1) | 1) & (code < 128 ? (ascii[code] as number) : (otherMask.get(code) ?? anyMask));
        if (state & last) return j - length + 1;
      }
      return -1;
    };
  }
  const top = words - 1;
  const state = new Uint32Array(words);
  return (value, from, end) => {
    state.fill(0);
    for (let j = from; j < end; j++) {
      const code = value.charCodeAt(j);
      const table = code < 128 ? ascii : (other.get(code) ?? any);
      const base = code < 128 ? code * words : 0;
      let carry = 1;
      for (let w = 0; w < words; w++) {
        const s = state[w] as number;
        state[w] = ((s << 1) | carry) & (table[base + w] as number);
        carry = s >>> 31;
      }
      if ((state[top] as number) & last) return j - length + 1;
    }
    return -1;
  };
}

/** A matcher; `metered` ones (policy rules, in decisions) spend the decision's budget on searches (see finder). */
export function compileGlob(pattern: string, metered = false): Matcher {
  if (pattern === '*') return () => true;
  if (!/[*?]/.test(pattern)) return (value) => value === pattern;
  const parts = pattern.split('*').map(segment);
  const first = parts[0] as Segment;
  if (parts.length === 1) return (value) => value.length === first.text.length && fitsAt(value, first, 0);
  const last = parts.at(-1) as Segment;
  if (parts.length === 2 && last.text === '' && !first.wild) return (value) => value.startsWith(first.text);
  const middle = parts.slice(1, -1).filter((seg) => seg.text.length > 0);
  const finders = middle.map((seg) => finder(seg, metered));
  const lengths = middle.map((seg) => seg.text.length);
  const minLength = parts.reduce((sum, seg) => sum + seg.text.length, 0);
  return (value) => {
    if (value.length < minLength) return false;
    const end = value.length - last.text.length;
    if (!fitsAt(value, first, 0) || !fitsAt(value, last, end)) return false;
    let at = first.text.length;
    for (let i = 0; i < finders.length; i++) {
      const found = (finders[i] as Finder)(value, at, end);
      if (found < 0) return false;
      at = found + (lengths[i] as number);
    }
    return true;
  };
}

/** Any of the patterns. */
export function compileGlobs(patterns: readonly string[], metered = false): Matcher {
  const matchers = patterns.map((pattern) => compileGlob(pattern, metered));
  return matchers.length === 1 ? (matchers[0] as Matcher) : (value) => matchers.some((m) => m(value));
}
