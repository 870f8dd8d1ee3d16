/**
 * docs/architecture.md is checked against the code: every file or folder it names in
 * backticks exists, so the page cannot silently drift from the tree it describes.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

it('docs/architecture.md names only paths that exist', () => {
  const text = readFileSync(join(ROOT, 'docs/architecture.md'), 'utf8');
  const paths = [...text.matchAll(/`((?:apps|packages|spec|tools|tests|docs)\/[^`<>*\s]+)`/g)].map((m) => m[1] as string);
  expect(paths.length).toBeGreaterThan(30);
  expect(paths.filter((path) => !existsSync(join(ROOT, path)))).toEqual([]);
});
