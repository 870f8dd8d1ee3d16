/**
 * The `Mcp-Param-*` declarations of MCP servers' tools (mcp_tool_param_headers), shared by the
 * server processes: the gateway's ParamHeaders (mcp-gateway/param-headers.ts) keeps a copy and
 * reads it here, since an edge reads no table itself.
 */
import { type Kysely, sql } from 'kysely';
import type { DB } from '../../db/schema.ts';
import type { McpTarget } from './mcp-dialer.ts';

/** A tool's declarations: each argument that has a header, and the header's name. */
export interface ToolDeclarations {
  tool: string;
  declared: Record<string, string>;
}

export interface ParamHeaderStore {
  /** The server's declarations, as listed at its current URL. */
  load(target: McpTarget): Promise<ToolDeclarations[]>;
  /** A listing page's declarations, replacing what its tools had. */
  save(target: McpTarget, tools: readonly ToolDeclarations[]): Promise<void>;
}

export const paramHeaderStore = (db: Kysely<DB>): ParamHeaderStore => ({
  async load(target) {
    const rows = await db
      .selectFrom('mcp_tool_param_headers')
      .select(['tool', 'declared'])
      .where('workspace_id', '=', target.workspace_id)
      .where('server_id', '=', target.id)
      .where('transport_url', '=', target.transport_url)
      .execute();
    return rows.map((row) => ({ tool: row.tool, declared: row.declared as Record<string, string> }));
  },
  async save(target, tools) {
    if (tools.length === 0) return;
    await db
      .insertInto('mcp_tool_param_headers')
      .values(
        tools.map(({ tool, declared }) => ({
          workspace_id: target.workspace_id,
          server_id: target.id,
          tool,
          transport_url: target.transport_url,
          declared: JSON.stringify(declared),
        })),
      )
      .onConflict((oc) =>
        oc.columns(['workspace_id', 'server_id', 'tool']).doUpdateSet({
          transport_url: (eb) => eb.ref('excluded.transport_url'),
          declared: (eb) => eb.ref('excluded.declared'),
          learned_at: sql`now()`,
        }),
      )
      .execute();
  },
});
