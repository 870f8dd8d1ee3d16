import { describe, expect, it } from 'vitest';
import { isSupportedNode } from '../src/node-version.ts';

describe('isSupportedNode: the versions in package.json engines (>=24.18.0)', () => {
  it.each(['24.18.0', '24.21.0', '25.1.0', '26.12.1', '100.0.0'])('runs on %s', (version) => {
    expect(isSupportedNode(version)).toBe(true);
  });
  it.each(['20.20.2', '22.18.0', '22.23.3', '23.11.0', '24.0.0', '24.17.1', '18.20.8', '0.10.48'])('refuses %s', (version) => {
    expect(isSupportedNode(version)).toBe(false);
  });
});
