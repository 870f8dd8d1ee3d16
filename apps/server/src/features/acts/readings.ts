/**
 * The spellings an upstream may read as the same URL, path or resource URI as the one Warden
 * sends: servers that fold case (Express's default router, IIS, case-insensitive file systems),
 * that decode percent-escapes twice (`/%2561dmin` is `/admin` to them), and PHP, which renames
 * `.`, ` ` and `[` in query parameter names to `_` (`?.method=` reaches Laravel as `_method`).
 *
 * Block and approval rules match every reading (policies/engine.ts); allow rules only the form
 * sent. When in doubt the more restrictive reading wins.
 */

/** At most this many rounds of percent-decoding: enough for any nesting an upstream undoes, bounded for the hot path. */
const DECODE_ROUNDS = 4;
const ASCII_ESCAPE = /%([0-7][0-9A-Fa-f])/g;

/** Percent-escapes of ASCII characters decoded until nothing changes (double and deeper encodings). */
export function decodeRepeatedly(value: string): string {
  let current = value;
  for (let round = 0; round < DECODE_ROUNDS && current.includes('%'); round++) {
    const next = current.replace(ASCII_ESCAPE, (_, hex: string) => String.fromCharCode(Number.parseInt(hex, 16)));
    if (next === current) break;
    current = next;
  }
  return current;
}

/** A query parameter's name as PHP reads it: `+` is a space, escapes decoded, leading spaces dropped, then ` `, `.` and `[` become `_`. */
export function phpParameterName(name: string): string {
  return decodeRepeatedly(name.replace(/\+/g, ' ')).replace(/^ +/, '').replace(/[ .[]/g, '_');
}

/** The value with its query's parameter names as PHP reads them (unchanged when it has no query). */
function phpQuery(value: string): string {
  const at = value.indexOf('?');
  if (at < 0) return value;
  const names = value
    .slice(at + 1)
    .split('&')
    .map((pair) => {
      const equals = pair.indexOf('=');
      return equals < 0 ? phpParameterName(pair) : `${phpParameterName(pair.slice(0, equals))}${pair.slice(equals)}`;
    });
  return `${value.slice(0, at + 1)}${names.join('&')}`;
}

let lastValue: string | undefined;
let lastReadings: string[] = [];

/**
 * The case-folded readings of `value` (lower-case: match them with a lower-cased pattern): as
 * sent, fully decoded, and with PHP's parameter names. Memoised for the last value, since every
 * block and approval rule of a decision asks about the same one.
 */
export function foldedReadings(value: string): string[] {
  if (value === lastValue) return lastReadings;
  const folded = value.toLowerCase();
  const decoded = decodeRepeatedly(value).toLowerCase();
  const out = [folded];
  if (decoded !== folded) out.push(decoded);
  if (value.includes('?')) {
    const php = phpQuery(decodeRepeatedly(value)).toLowerCase();
    if (!out.includes(php)) out.push(php);
  }
  lastValue = value;
  lastReadings = out;
  return out;
}
