/** oidc-provider ships no types: what the tests use of it. */
declare module 'oidc-provider' {
  import type { IncomingMessage, ServerResponse } from 'node:http';
  export default class Provider {
    constructor(issuer: string, configuration: unknown);
    callback(): (req: IncomingMessage, res: ServerResponse) => void;
  }
}
