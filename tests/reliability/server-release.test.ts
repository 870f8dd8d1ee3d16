/**
 * A closed server lets go of everything it held. Its HTTP listener was closed with net's close
 * (so that a request on its way is not reset), which skipped http's own cleanup: the timer that
 * checks request timeouts kept the server, the app and the database (PGlite's ~230 MB of
 * WebAssembly memory) reachable for the life of the process. The test runner runs file after
 * file in one process, and a worker grew to 11.6 GB and was killed by the kernel's OOM killer.
 * Here a closed server must be collectable.
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { expect, it } from 'vitest';
import { startTestServer } from '../support/server.ts';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

async function collected(ref: WeakRef<object>): Promise<boolean> {
  const tick = () => new Promise((resolve) => setTimeout(resolve, 50));
  for (let attempt = 0; attempt < 20; attempt++) {
    // a deref keeps its target alive to the end of the task: collect in the next one
    await tick();
    gc();
    await tick();
    if (ref.deref() === undefined) return true;
  }
  return false;
}

/** Starts a server, uses it, closes it; answers weak references to what it held. */
async function serveOnce() {
  const server = await startTestServer();
  expect((await server.api('GET', '/agents')).status).toBe(200);
  const held = { database: new WeakRef(server.database), db: new WeakRef(server.database.db) };
  await server.close();
  return held;
}

it('servers closed one after another can be collected: memory does not grow with each', async () => {
  const first = await serveOnce();
  // a second server, so that whatever keeps only the latest of something lets go of the first
  await serveOnce();
  expect(await collected(first.db), 'the first Kysely instance is still reachable').toBe(true);
  expect(await collected(first.database), 'the first database is still reachable').toBe(true);
}, 60_000);
