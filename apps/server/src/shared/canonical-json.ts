/**
 * Canonical JSON, for what is hashed: the audit chain, and the act an approval authorises.
 */

/** Text emitted as is by stableJson (everything else on its stack is a value to serialise). */
class Token {
  constructor(readonly text: string) {}
}
const COMMA = new Token(',');
const CLOSE_ARRAY = new Token(']');
const CLOSE_OBJECT = new Token('}');

const isPrimitive = (value: unknown) => value === null || typeof value !== 'object';

const byKey = ([a]: [string, unknown], [b]: [string, unknown]) => (a < b ? -1 : a > b ? 1 : 0);

/**
 * JSON with object keys sorted, so equal values always serialise alike. Iterative (an
 * explicit stack, not recursion), so no stored value, however deeply nested, can overflow
 * the call stack and jam the sealer or the verification. The output must never change:
 * sealed hashes depend on it.
 */
export function stableJson(root: unknown): string {
  const out: string[] = [];
  const stack: unknown[] = [root];
  while (stack.length > 0) {
    const value = stack.pop();
    if (value instanceof Token) {
      out.push(value.text);
    } else if (Array.isArray(value)) {
      if (value.every(isPrimitive)) {
        out.push(JSON.stringify(value)); // the same bytes as the loop below, in one native call
        continue;
      }
      out.push('[');
      stack.push(CLOSE_ARRAY);
      for (let i = value.length - 1; i >= 0; i--) {
        stack.push(value[i]);
        if (i > 0) stack.push(COMMA);
      }
    } else if (value && typeof value === 'object') {
      const entries = Object.entries(value as Record<string, unknown>).sort(byKey);
      out.push('{');
      stack.push(CLOSE_OBJECT);
      for (let i = entries.length - 1; i >= 0; i--) {
        const [key, child] = entries[i] as [string, unknown];
        stack.push(child, new Token(`${JSON.stringify(key)}:`));
        if (i > 0) stack.push(COMMA);
      }
    } else {
      out.push(JSON.stringify(value ?? null));
    }
  }
  return out.join('');
}
