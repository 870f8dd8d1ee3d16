export * from './generated/dashboard/operations.gen.js';
export type * from './generated/dashboard/types.gen.js';
