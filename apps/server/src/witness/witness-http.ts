/**
 * The witness's HTTP interface (C2SP tlog-witness): `POST /add-checkpoint`, with the submission
 * prefix at the root. `GET /` names the witness and its vkey, for the operator who configures a
 * log with it. Nothing else is served; there is no authentication beyond the log's signature.
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
