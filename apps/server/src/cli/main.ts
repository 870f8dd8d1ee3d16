#!/usr/bin/env -S npx tsx
/**
 * The `warden` CLI (`npm run warden -- …`; the commands are in cli.ts): checks the Node.js
 * version before anything else is loaded, so that an older Node is told in one line.
 */
import { requireSupportedNode } from '../node-version.ts';

requireSupportedNode('warden');
await import('./cli.ts');
