/**
 * `text` cut to at most `max` code points (JSON Schema's `maxLength` counts code points),
 * ending in `…` when cut, and never inside a surrogate pair.
 */
export function truncate(text: string, max: number): string {
  // Code points never outnumber UTF-16 units: short strings need no counting.
  if (text.length <= max) return text;
  const points = Array.from(text);
  return points.length <= max ? text : `${points.slice(0, max - 1).join('')}…`;
}

/** An MCP error's message without the `MCP error <code>: ` the SDKs write into it (sent on, it would be prefixed again). */
export const bareMcpMessage = (message: string) => message.replace(/^MCP error -?\d+: /, '');
