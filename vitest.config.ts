import { configDefaults, defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['tests/**/*.test.ts', 'apps/*/test/**/*.test.ts', 'packages/*/test/**/*.test.ts'],
    exclude: configDefaults.exclude,
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // Each test file starts its own server on its own fresh database.
    pool: 'forks',
    maxWorkers: 2,
  },
});
