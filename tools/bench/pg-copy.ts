/**
 * `COPY … FROM STDIN` through pg's own client, without pg-copy-streams: a Submittable that sends
 * the statement, then, when the server asks for the data (CopyInResponse), writes the chunks as
 * CopyData messages (waiting for the socket to drain) and ends with CopyDone. Resolves with the
 * rows the server reports; a failure of the source sends CopyFail, so the statement fails whole.
 */
import { once } from 'node:events';
import type pg from 'pg';

/** What of pg's connection the copy uses (the methods @types/pg leaves out). */
interface CopyConnection {
  stream: NodeJS.WritableStream & { writableNeedDrain: boolean };
  query(text: string): void;
  sendCopyFromChunk(chunk: Buffer): void;
  endCopyFrom(): void;
  sendCopyFail(message: string): void;
}

/** Streams `chunks` (COPY text format) into `text`, a `COPY … FROM STDIN` statement; returns the rows copied. */
export function copyFrom(client: pg.Client, text: string, chunks: Iterable<string> | AsyncIterable<string>): Promise<number> {
  return new Promise<number>((resolve, reject) => {
    let rows = 0;
    let failed = false;
    const submittable = {
      submit(connection: CopyConnection) {
        connection.query(text);
      },
      handleCopyInResponse(connection: CopyConnection) {
        void (async () => {
          try {
            for await (const chunk of chunks) {
              if (failed) return;
              connection.sendCopyFromChunk(Buffer.from(chunk, 'utf8'));
              if (connection.stream.writableNeedDrain) await once(connection.stream, 'drain');
            }
            connection.endCopyFrom();
          } catch (error) {
            connection.sendCopyFail(`the source failed: ${(error as Error).message}`);
          }
        })();
      },
      handleCommandComplete(message: { text?: string }) {
        rows = Number(/^COPY (\d+)/.exec(message.text ?? '')?.[1] ?? 0);
      },
      handleReadyForQuery() {
        if (!failed) resolve(rows);
      },
      handleError(error: Error) {
        failed = true;
        reject(error);
      },
      handleRowDescription() {},
      handleDataRow() {},
      handleEmptyQuery() {},
      handlePortalSuspended() {},
      handleCopyData() {},
    };
    client.query(submittable as unknown as pg.Submittable);
  });
}

/** A value in COPY's text format: `\N` for null; backslash, tab, newline and carriage return escaped. */
export function copyValue(value: string | number | null | undefined): string {
  if (value === null || value === undefined) return '\\N';
  const text = String(value);
  return /[\\\t\n\r]/.test(text)
    ? text.replaceAll('\\', '\\\\').replaceAll('\t', '\\t').replaceAll('\n', '\\n').replaceAll('\r', '\\r')
    : text;
}
