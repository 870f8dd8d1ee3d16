import { describe, expect, it } from 'vitest';
import { isSupportedNode } from '../src/node-version.ts';

describe('isSupportedNode: the versions in package.json engines (^22.18.0 || >=24.0.0)', () => {
  it.each(['24.0.0', '24.21.0', '25.1.0', '26.12.1', '22.18.0', '22.23.3'])('runs on %s', (version) => {
    expect(isSupportedNode(version)).toBe(true);
  });
  it.each(['20.20.2', '20.19.0', '22.17.1', '23.11.0', '18.20.8', '0.10.48'])('refuses %s', (version) => {
    expect(isSupportedNode(version)).toBe(false);
  });
});
