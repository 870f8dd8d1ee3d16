import { McpError } from '@modelcontextprotocol/sdk/types.js';

/**
 * A JSON-RPC error of Warden's own. The SDK's McpError writes `MCP error <code>: ` into its
 * message, which its Protocol sends as the message and every client prefixes again (the code
 * twice): the message is sent as written.
 */
export function rpcError(code: number, message: string, data?: unknown): McpError {
  const error = new McpError(code, message, data);
  error.message = message;
  return error;
}
