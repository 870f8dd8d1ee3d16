/**
 * The dashboard's audit export: events as CSV (RFC 4180) or NDJSON lines, their contexts
 * redacted as the audit page shows them.
 */
import type { AuditEvent } from '@warden/contract';
import { withRedactedContext } from './redact.ts';

export type ExportFormat = 'csv' | 'ndjson';

export const EXPORT_CONTENT_TYPES: Record<ExportFormat, string> = {
  csv: 'text/csv; charset=utf-8',
  ndjson: 'application/x-ndjson; charset=utf-8',
};

const CSV_COLUMNS = [
  'id',
  'event_timestamp',
  'sequence',
  'hash',
  'source',
  'agent',
  'action',
  'resource',
  'tool',
  'environment',
  'user',
  'policy',
  'result',
  'severity',
  'message',
  'approval_id',
  'request_id',
  'context',
] as const satisfies ReadonlyArray<keyof AuditEvent>;

/** What a spreadsheet would run as a formula (OWASP "CSV injection"). */
const FORMULA_START = /^[=+\-@\t\r]/;

/** One CSV cell: quoted when it must be, and never a formula. */
export function csvCell(value: unknown): string {
  if (value === null || value === undefined) return '';
  let text = typeof value === 'object' ? JSON.stringify(value) : String(value);
  if (typeof value === 'string' && FORMULA_START.test(text)) text = `'${text}`;
  return /[",\r\n]/.test(text) ? `"${text.replaceAll('"', '""')}"` : text;
}

const csvLine = (event: AuditEvent) => `${CSV_COLUMNS.map((column) => csvCell(event[column])).join(',')}\r\n`;

/**
 * The export's text, a page of events per chunk. The first page is read before anything is
 * yielded, so a failing read is answered as an error rather than as an empty file.
 */
export async function* exportChunks(format: ExportFormat, pages: AsyncIterable<AuditEvent[]>): AsyncGenerator<string> {
  const iterator = pages[Symbol.asyncIterator]();
  let page = await iterator.next();
  if (format === 'csv') yield `${CSV_COLUMNS.join(',')}\r\n`;
  while (!page.done) {
    const events = page.value.map(withRedactedContext);
    yield format === 'csv' ? events.map(csvLine).join('') : events.map((event) => `${JSON.stringify(event)}\n`).join('');
    page = await iterator.next();
  }
}
