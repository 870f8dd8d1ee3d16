/**
 * An MCP server for the MCP scenarios, in a child process of its own: the tests' real MCP
 * server (official SDK, Streamable HTTP), or with `bounds` the one whose `big` tool answers any
 * number of bytes (`/sse` or `/json`). Reports { type: 'ready', url, pid } over IPC.
 */
import { startBoundsUpstream } from '../../tests/security/mcp-bounds-upstream.ts';
import { startTestMcpServer } from '../../tests/support/mcp-server.ts';

const mcp = process.argv[2] === 'bounds' ? await startBoundsUpstream() : await startTestMcpServer();
process.send?.({ type: 'ready', url: mcp.url, pid: process.pid });

const stop = () => void mcp.close().finally(() => process.exit(0));
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
process.on('disconnect', stop);
