/** An upstream OAuth connection's configuration as an MCP server registration sets it, and as answers show it. */
import type { UpstreamOAuthInputWritable as UpstreamOAuthInput, UpstreamOAuth as UpstreamOAuthView } from '@warden/contract';
import type { Kysely } from 'kysely';
import type { DB } from '../../db/schema.ts';
import { ApiError } from '../../shared/errors.ts';
import type { SecretBox } from '../webhooks/secrets.ts';
import * as repo from './upstream-oauth.repository.ts';

/** A connection as mcp-servers.repository.ts selects it (JSON: times are strings; `agent` null for the workspace's). */
interface GrantView {
  agent: string | null;
  status: 'connected' | 'reauthorization_required';
  status_detail: string | null;
  connected_at: string;
  expires_at: string | null;
}

/** The columns answers show of a server's OAuth configuration and connections, as mcp-servers.repository.ts selects them. */
export interface OAuthViewColumns {
  oauth_authorization_server: string | null;
  oauth_issuer: string | null;
  oauth_client_id: string | null;
  oauth_scopes: string[] | null;
  oauth_grants: (Omit<GrantView, 'status'> & { status: string })[];
}

const isoOf = (time: string | null) => (time ? new Date(time).toISOString() : null);

export function oauthView(row: OAuthViewColumns, maxAgents: number): UpstreamOAuthView {
  const workspace = row.oauth_grants.find((g) => g.agent === null);
  return {
    type: 'oauth',
    header: 'authorization',
    hint: '…',
    authorization_server: row.oauth_issuer ?? row.oauth_authorization_server,
    client_id: row.oauth_client_id,
    scopes: row.oauth_scopes ?? [],
    status: (workspace?.status ?? 'not_connected') as UpstreamOAuthView['status'],
    status_detail: workspace?.status_detail ?? null,
    connected_at: isoOf(workspace?.connected_at ?? null),
    expires_at: isoOf(workspace?.expires_at ?? null),
    agents: row.oauth_grants
      .filter((g) => g.agent !== null)
      .slice(0, maxAgents)
      .map((g) => ({
        agent: g.agent as string,
        status: g.status as GrantView['status'],
        status_detail: g.status_detail,
        connected_at: isoOf(g.connected_at) as string,
        expires_at: isoOf(g.expires_at),
      })),
  };
}

/** Stores a server's OAuth configuration (in the caller's transaction), ending its connections. */
export async function configureOAuth(trx: Kysely<DB>, box: SecretBox, workspaceId: string, serverId: string, input: UpstreamOAuthInput) {
  if (input.client_secret !== undefined && input.client_id === undefined)
    throw new ApiError('invalid_request', 'body/upstream_auth.client_secret needs a client_id');
  await repo.configure(trx, {
    workspace_id: workspaceId,
    server_id: serverId,
    authorization_server: input.authorization_server ? new URL(input.authorization_server).href : null,
    scopes: input.scopes ?? [],
    client_id: input.client_id ?? null,
    client_secret_encrypted: input.client_secret ? box.seal(input.client_secret) : null,
  });
}
