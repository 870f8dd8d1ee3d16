/**
 * The witness's HTTP interface (C2SP tlog-witness): `POST /add-checkpoint`, with the submission
 * prefix at the root. `GET /` names the witness and its vkey, for the operator who configures a
 * log with it. `GET /<hex SHA-256 of a log's origin>/checkpoint` shows monitors the latest
 * checkpoint it cosigned for that log (the log's signature and its own cosignature), so a
 * monitor sees what clients were shown. Nothing else is served; there is no authentication
 * beyond the log's signature.
 */
import { createServer, type Server } from 'node:http';
import { MAX_REQUEST_BYTES, type Witness } from './witness.ts';

export function witnessServer(witness: Witness, name: string): Server {
  return createServer((request, response) => {
    const send = (status: number, contentType: string, body: string) => {
      response.writeHead(status, { 'content-type': contentType, 'cache-control': 'no-store' }).end(body);
    };
    const path = (request.url ?? '/').split('?')[0];
    if (request.method === 'GET' && path === '/') {
      send(200, 'application/json', JSON.stringify({ name, vkey: witness.vkey }));
      return;
    }
    const monitored = /^\/([0-9a-f]{64})\/checkpoint$/.exec(path ?? '');
    if (request.method === 'GET' && monitored) {
      const note = witness.monitored(monitored[1] as string);
      return note
        ? send(200, 'text/plain; charset=utf-8', note)
        : send(404, 'text/plain; charset=utf-8', 'no checkpoint cosigned for that log\n');
    }
    if (path !== '/add-checkpoint') return send(404, 'text/plain; charset=utf-8', 'not found\n');
    if (request.method !== 'POST') {
      response.setHeader('allow', 'POST');
      return send(405, 'text/plain; charset=utf-8', 'add-checkpoint takes POST\n');
    }
    const chunks: Buffer[] = [];
    let size = 0;
    request.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > MAX_REQUEST_BYTES) {
        send(413, 'text/plain; charset=utf-8', `a request is at most ${MAX_REQUEST_BYTES} bytes\n`);
        request.destroy();
        return;
      }
      chunks.push(chunk);
    });
    request.on('end', () => {
      if (response.headersSent) return;
      witness.addCheckpoint(Buffer.concat(chunks).toString('utf8')).then(
        (answer) => send(answer.status, answer.contentType, answer.body),
        (error: unknown) => send(500, 'text/plain; charset=utf-8', `witness failed: ${(error as Error).message}\n`),
      );
    });
  });
}
