/**
 * A resource that a test file (or a describe block) starts before its tests and stops after
 * them, used through a handle that exists at once: the preamble
 *
 *   let thing: Thing;
 *   beforeAll(async () => { thing = await startThing(); });
 *   afterAll(async () => { await thing?.close(); });
 *
 * becomes `const thing = useFixture(startThing, (t) => t.close())`. The handle forwards every
 * property to the running resource; reading it while none runs (at collection time, before its
 * `beforeAll` or after its `afterAll`) throws, naming the fixture. Hooks run in the order they
 * are registered (after hooks in reverse), so a fixture declared first starts first and stops
 * last.
 */
import { afterAll, beforeAll } from 'vitest';

/**
 * How long a start (or a stop) may take: a server on a fresh database takes a second or two on an
 * idle machine and ~20 s on a loaded one; this bounds a hang, not the speed (vitest's hookTimeout
 * is 60 s). WARDEN_TEST_START_CAP_MS overrides it, as for child processes (child-ready.ts).
 */
const START_TIMEOUT_MS = Number(process.env.WARDEN_TEST_START_CAP_MS || 120_000);

export function useFixture<T extends object>(
  start: () => Promise<T>,
  stop: (value: T) => Promise<void> | void,
  name = 'fixture',
  timeoutMs = START_TIMEOUT_MS,
): T {
  let current: T | undefined;
  beforeAll(async () => {
    current = await start();
  }, timeoutMs);
  afterAll(async () => {
    const stopping = current;
    current = undefined;
    if (stopping) await stop(stopping);
  }, timeoutMs);
  return new Proxy({} as T, {
    get(_target, property) {
      if (current) return Reflect.get(current, property);
      if (property === 'then' || typeof property === 'symbol') return undefined; // not a thenable, not inspectable
      throw new Error(`${name}: '${property}' was read while it does not run (before its beforeAll, or after its afterAll)`);
    },
    has: (_target, property) => current !== undefined && property in current,
  });
}
