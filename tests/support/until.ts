/** Polling for what a test waits on (a seal, a checkpoint, a delivery), bounded in time. */

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** What a truthy value of T can be. */
type Truthy<T> = Exclude<T, false | 0 | '' | null | undefined>;

/** Polls until `probe` returns something truthy; fails after `timeoutMs`. */
export async function until<T>(what: string, probe: () => T | Promise<T>, timeoutMs = 10_000): Promise<Truthy<T>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value) return value as Truthy<T>;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(25);
  }
}
