/** The bundled contracts, read once: every tool and the server read these files. */
import { readFileSync } from 'node:fs';

const dist = (name: string) => new URL(`../../../spec/dist/${name}`, import.meta.url);

export const specText = readFileSync(dist('openapi.json'), 'utf8');
export const loadSpec = () => JSON.parse(specText) as Record<string, unknown> & { info: { version: string } };
export const loadDashboardSpec = () => JSON.parse(readFileSync(dist('dashboard.json'), 'utf8')) as Record<string, unknown>;
