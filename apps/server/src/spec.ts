/** The bundled contract, read once: every tool and the server read this one file. */
import { readFileSync } from 'node:fs';

export const SPEC_FILE = new URL('../../../spec/dist/openapi.json', import.meta.url);
export const specText = readFileSync(SPEC_FILE, 'utf8');
export const loadSpec = () => JSON.parse(specText) as Record<string, unknown> & { info: { version: string } };
