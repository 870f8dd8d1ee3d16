/**
 * `Mcp-Param-*` headers (revision 2026-07-28, SEP-2243): a tool marks arguments with
 * `x-mcp-header: <Name>` in its input schema, and a client repeats each such argument in the
 * header `Mcp-Param-<Name>`, for what sits in front of Warden to route or decide on. Like
 * `Mcp-Method` and `Mcp-Name` (standard-headers.ts) they are part of the act: a call whose
 * headers say another value than its body, or that leaves one out, is refused before anything
 * is decided or sent. The declarations are the server's: learned from the tool listings Warden
 * relays, by any process (kept in mcp_tool_param_headers: execution/mcp-param-headers.repository.ts,
 * read again by a process at most every REFRESH_MS per server); a tool no process has listed is
 * not checked.
 */
import type { Tool } from '@modelcontextprotocol/sdk/types.js';
import { isObject } from '../../shared/objects.ts';
import type { McpTarget } from '../execution/mcp-dialer.ts';
import type { ParamHeaderStore } from '../execution/mcp-param-headers.repository.ts';
import { decoded, type HeaderMismatch, type Headers, mismatch, single } from './standard-headers.ts';

/** Servers whose declarations are kept; past it, the longest known is forgotten (read again when next needed). */
const MAX_SERVERS = 1_000;
/** How stale a process's copy of a server's declarations may be: a listing relayed by another process is seen within it. */
const REFRESH_MS = 30_000;

/** Per tool, each argument that has a header, and the header's name. */
type Declarations = Map<string, Record<string, string>>;

export class ParamHeaders {
  private readonly servers = new Map<string, { tools: Declarations; read: number }>();

  constructor(private readonly store: ParamHeaderStore) {}

  /** Takes the declarations of a listing's tools (a page of it: pages add up), here and for every process. */
  async learn(target: McpTarget, tools: Tool[]): Promise<void> {
    const known = await this.declarations(target);
    const listed = tools.map((tool) => {
      const properties = isObject(tool.inputSchema?.properties) ? tool.inputSchema.properties : {};
      const declared: Record<string, string> = {};
      for (const [argument, schema] of Object.entries(properties))
        if (isObject(schema) && typeof schema['x-mcp-header'] === 'string') declared[argument] = schema['x-mcp-header'];
      known.set(tool.name, declared);
      return { tool: tool.name, declared };
    });
    await this.store.save(target, listed);
  }

  /** The server's declarations as this process knows them, read again from the store when stale. */
  private async declarations(target: McpTarget): Promise<Declarations> {
    const key = keyOf(target);
    const kept = this.servers.get(key);
    if (kept && Date.now() - kept.read < REFRESH_MS) return kept.tools;
    const tools: Declarations = new Map((await this.store.load(target)).map(({ tool, declared }) => [tool, declared]));
    this.servers.delete(key);
    if (this.servers.size >= MAX_SERVERS) this.servers.delete(this.servers.keys().next().value as string);
    this.servers.set(key, { tools, read: Date.now() });
    return tools;
  }

  /**
   * Why a call's `Mcp-Param-*` headers disagree with its arguments, or null. A header must be
   * sent for each declared argument the body carries (by a 2026-07-28 client: `required`), and
   * none for one it does not.
   */
  async check(
    target: McpTarget,
    tool: string,
    args: Record<string, unknown>,
    headers: Headers,
    required: boolean,
  ): Promise<HeaderMismatch | null> {
    const declared = (await this.declarations(target)).get(tool);
    if (!declared) return null;
    for (const [argument, name] of Object.entries(declared)) {
      const header = `Mcp-Param-${name}`;
      const sent = single(headers, header.toLowerCase());
      if (sent === null) return mismatch('', '', `${header} is sent more than once`);
      const value = args[argument];
      if (value === undefined || value === null) {
        if (sent !== undefined) return mismatch(sent, '', `${header} is sent, but the body has no argument ${argument}`);
        continue;
      }
      const expected = typeof value === 'string' ? value : typeof value === 'object' ? JSON.stringify(value) : String(value);
      if (sent === undefined) {
        if (required) return mismatch('', expected, `${tool} needs the ${header} header (its argument ${argument})`);
        continue;
      }
      const said = decoded(sent);
      if (said === null) return mismatch(sent, expected, `${header} carries a malformed base64 sentinel`);
      if (said !== expected) return mismatch(said, expected, `${header} differs from the body's argument ${argument}`);
    }
    return null;
  }
}

/** A server's declarations hold for its registration as it is: a new URL is another server. */
const keyOf = (target: McpTarget) => `${target.id}\u0000${target.transport_url}`;
