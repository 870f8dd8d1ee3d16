/**
 * `npm start`: checks the Node.js version first, then launches (launch.ts). Nothing else is
 * imported here, so an older Node is told in one line before any other module is loaded.
 */
import { requireSupportedNode } from './node-version.ts';

requireSupportedNode('warden');
await import('./launch.ts');
