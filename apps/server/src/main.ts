/** `npm start`: open the database, migrate, bootstrap, serve. */
import { startServer } from './server.ts';

const server = await startServer();
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    void server.close().then(() => process.exit(0));
  });
}
