/**
 * Worker threads do not inherit the main thread's module hooks: a thread starts with one line of
 * JavaScript that loads its entry. Run from source (tsx), the entry is TypeScript and loads
 * through tsx's API; run built (`node apps/server/dist/main.js`), it is JavaScript and loads as
 * it is, with no tsx installed.
 */

/** The module `name` next to the module at `base` (its import.meta.url), in the same form: `.ts` from source, `.js` built. */
export function siblingModule(name: string, base: string): string {
  return new URL(`./${name}${base.endsWith('.ts') ? '.ts' : '.js'}`, base).href;
}

/** The code a worker thread is started with (`eval: true`) to load `entry`. */
export function threadBoot(entry: string): string {
  if (!entry.endsWith('.ts')) return `import(${JSON.stringify(entry)})`;
  const tsx = import.meta.resolve('tsx/esm/api');
  return `import(${JSON.stringify(tsx)}).then(({ tsImport }) => tsImport(${JSON.stringify(entry)}, ${JSON.stringify(entry)}))`;
}
