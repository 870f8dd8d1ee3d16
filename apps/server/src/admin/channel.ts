/**
 * The local admin channel: while a server holds the embedded database (only one process may
 * open it), the CLI sends its commands here, over a Unix socket inside the data directory
 * (mode 0600: only the owner of the data may use it). Never on a TCP port.
 */
import { chmodSync, rmSync } from 'node:fs';
import { createServer, request } from 'node:http';
import { join, resolve } from 'node:path';
import { AdminError } from '../features/identity/workspaces.service.ts';
import type { Logger } from '../logger.ts';
import { type AdminContext, runAdminCommand } from './commands.ts';

export const adminSocketPath = (dataDir: string) => join(resolve(dataDir), 'admin.sock');

export async function startAdminChannel(dataDir: string, context: AdminContext, logger: Logger) {
  const path = adminSocketPath(dataDir);
  rmSync(path, { force: true });
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', async () => {
      const reply = (status: number, body: unknown) =>
        res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
      try {
        const { command, args } = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { command: string; args: Record<string, string> };
        reply(200, { result: await runAdminCommand(context, command, args ?? {}) });
      } catch (error) {
        if (error instanceof AdminError) return reply(400, { error: error.message });
        logger.error('admin command failed', { cause: error });
        reply(500, { error: 'internal error (see the server log)' });
      }
    });
  });
  await new Promise<void>((done, fail) => {
    server.once('error', fail);
    server.listen(path, done);
  });
  chmodSync(path, 0o600);
  return {
    close: () =>
      new Promise<void>((done) => {
        server.close(() => done());
        rmSync(path, { force: true });
      }),
  };
}

/** Sends one command to the server holding `dataDir`. */
export function sendAdminCommand(dataDir: string, command: string, args: Record<string, string | undefined>): Promise<unknown> {
  return new Promise((done, fail) => {
    const req = request(
      { socketPath: adminSocketPath(dataDir), method: 'POST', path: '/', headers: { 'content-type': 'application/json' } },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () => {
          const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { result?: unknown; error?: string };
          if (res.statusCode === 200) done(body.result);
          else fail(new AdminError(body.error ?? `admin channel answered ${res.statusCode}`));
        });
      },
    );
    req.on('error', fail);
    req.end(JSON.stringify({ command, args }));
  });
}
