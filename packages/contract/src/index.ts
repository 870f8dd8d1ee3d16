export * as dashboard from './dashboard.js';
export * from './generated/v1/operations.gen.js';
export type * from './generated/v1/types.gen.js';
