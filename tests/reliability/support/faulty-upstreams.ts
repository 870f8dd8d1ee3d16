/**
 * Upstreams that misbehave, on 127.0.0.1, counting their connections:
 * - hanging: accepts, reads, never answers (until closed);
 * - resetting: accepts, and resets the connection (TCP RST) as soon as the request's first
 *   bytes arrive.
 */
import { createServer, type Server, type Socket } from 'node:net';

export interface FaultyUpstream {
  url: string;
  port: number;
  /** Connections accepted so far. */
  accepted(): number;
  /** Connections open right now. */
  open(): number;
  close(): Promise<void>;
}

async function listen(
  onConnection: (socket: Socket) => void,
): Promise<{ server: Server; port: number; sockets: Set<Socket>; count: () => number }> {
  const sockets = new Set<Socket>();
  let accepted = 0;
  const server = createServer((socket) => {
    accepted++;
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => sockets.delete(socket));
    onConnection(socket);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, port: (server.address() as { port: number }).port, sockets, count: () => accepted };
}

function wrap(l: Awaited<ReturnType<typeof listen>>, path: string): FaultyUpstream {
  return {
    url: `http://127.0.0.1:${l.port}${path}`,
    port: l.port,
    accepted: l.count,
    open: () => l.sockets.size,
    close: async () => {
      for (const socket of l.sockets) socket.destroy();
      await new Promise<void>((resolve) => l.server.close(() => resolve()));
    },
  };
}

/** Accepts and reads, never answers. */
export async function startHangingUpstream(path = '/hang'): Promise<FaultyUpstream> {
  return wrap(
    await listen((socket) => {
      socket.resume(); // read and discard whatever comes
    }),
    path,
  );
}

/** Resets the connection when the request starts arriving. */
export async function startResettingUpstream(path = '/reset'): Promise<FaultyUpstream> {
  return wrap(
    await listen((socket) => {
      socket.once('data', () => socket.resetAndDestroy());
    }),
    path,
  );
}
