/**
 * The MCP server the runtime benchmark calls: the tests' real MCP server (official SDK,
 * Streamable HTTP) in a child process of its own. Reports { type: 'ready', url } over IPC.
 */
import { startTestMcpServer } from '../../tests/support/mcp-server.ts';

const mcp = await startTestMcpServer();
process.send?.({ type: 'ready', url: mcp.url, pid: process.pid });

const stop = () => {
  void mcp.close().finally(() => process.exit(0));
};
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
process.on('disconnect', stop);
