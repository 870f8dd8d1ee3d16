/** Types of tools/server-build.mjs (plain JavaScript, so that `npm start` needs no TypeScript tooling). */
export function sourcesDigest(): string;
export function ensureServerBuilt(say?: (line: string) => void): Promise<boolean>;
export const DIGEST_FILE: string;
