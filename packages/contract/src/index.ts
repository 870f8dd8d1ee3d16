export * from './generated/operations.gen.js';
export type * from './generated/types.gen.js';
