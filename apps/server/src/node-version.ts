/**
 * The Node.js versions Warden runs on: 24 LTS from 24.18 (`.nvmrc`, package.json `engines`;
 * why not 22: docs/decisions/0015-node-24-toolchain.md). The entry points check it before they
 * load anything else, so that an older Node is told in one line rather than failing inside a
 * library.
 */
export const SUPPORTED_NODE = '24.18 or later (24 LTS)';

/** Whether `version` (as in `process.versions.node`) is one Warden runs on. */
export function isSupportedNode(version: string): boolean {
  const [major = 0, minor = 0] = version.split('.').map(Number);
  return major > 24 || (major === 24 && minor >= 18);
}

/** Exits 1 with one line on stderr unless this Node.js is supported. */
export function requireSupportedNode(program: string): void {
  if (isSupportedNode(process.versions.node)) return;
  process.stderr.write(
    `${program}: Node.js ${SUPPORTED_NODE} is needed, this is Node.js ${process.versions.node} (see .nvmrc; tools/with-node24 runs a command with it)\n`,
  );
  process.exit(1);
}
