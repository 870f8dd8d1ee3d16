/**
 * A TCP proxy on 127.0.0.1 that can be cut and restored, to put a fault between Warden and
 * PostgreSQL: cut() resets every open connection and refuses new ones (reset on accept)
 * until restore().
 */
import { createConnection, createServer, type Server, type Socket } from 'node:net';

export interface TcpProxy {
  port: number;
  /** Connections accepted (and passed through) so far. */
  accepted(): number;
  /** Connections refused while cut. */
  refused(): number;
  /** Open client-side sockets right now. */
  open(): number;
  cut(): void;
  restore(): void;
  close(): Promise<void>;
}

export async function startTcpProxy(targetPort: number, targetHost = '127.0.0.1'): Promise<TcpProxy> {
  const sockets = new Set<Socket>();
  let down = false;
  let accepted = 0;
  let refused = 0;
  const kill = (socket: Socket) => {
    if (typeof socket.resetAndDestroy === 'function' && !socket.destroyed && socket.readyState !== 'opening') socket.resetAndDestroy();
    else socket.destroy();
  };
  const server: Server = createServer((client) => {
    if (down) {
      refused++;
      client.on('error', () => {});
      kill(client);
      return;
    }
    accepted++;
    const upstream = createConnection({ host: targetHost, port: targetPort });
    sockets.add(client);
    sockets.add(upstream);
    const drop = () => {
      sockets.delete(client);
      sockets.delete(upstream);
      client.destroy();
      upstream.destroy();
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  return {
    port,
    accepted: () => accepted,
    refused: () => refused,
    open: () => sockets.size / 2,
    cut: () => {
      down = true;
      for (const socket of [...sockets]) kill(socket);
      sockets.clear();
    },
    restore: () => {
      down = false;
    },
    close: async () => {
      down = true;
      for (const socket of [...sockets]) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** `url` (a PostgreSQL connection string) pointed at the proxy instead of the server. */
export function throughProxy(url: string, proxy: TcpProxy): string {
  const proxied = new URL(url);
  proxied.hostname = '127.0.0.1';
  proxied.port = String(proxy.port);
  return proxied.toString();
}
