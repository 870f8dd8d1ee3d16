import { randomUUID } from 'node:crypto';

/**
 * A time-ordered UUID (version 7, RFC 9562): 48 bits of Unix milliseconds, then 74 random
 * bits. For rows written at a high rate and indexed by id (audit events, their seals), so an
 * insert lands at the right edge of the index instead of on a random page: fewer pages touched
 * and fewer full-page images in the WAL after each checkpoint. The random part comes from a
 * version-4 UUID, so the variant bits are already right.
 */
export function timeOrderedUuid(milliseconds: number = Date.now()): string {
  const time = Math.max(0, Math.floor(milliseconds)).toString(16).padStart(12, '0').slice(-12);
  const random = randomUUID(); // xxxxxxxx-xxxx-4xxx-Vxxx-xxxxxxxxxxxx
  return `${time.slice(0, 8)}-${time.slice(8)}-7${random.slice(15, 18)}-${random.slice(19)}`;
}
