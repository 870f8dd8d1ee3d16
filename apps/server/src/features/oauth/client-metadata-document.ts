/**
 * Client ID Metadata Documents (draft-ietf-oauth-client-id-metadata-document, MCP 2025-11-25):
 * a client whose id is an https URL is described by the JSON document at that URL. Warden
 * fetches it through the egress guard (https only, no redirects, 5 s, 5 KiB), accepts it only
 * when it names that same URL as its `client_id`, lists redirect URIs, and asks for no client
 * secret (such clients are public), and answers the client as the SDK's handlers expect.
 */

import type { OAuthClientInformationFull } from '@modelcontextprotocol/sdk/shared/auth.js';
import { OAuthClientMetadataSchema } from '@modelcontextprotocol/sdk/shared/auth.js';
import { redirectUrisRefusal } from './redirect-uris.ts';

const TIMEOUT_MS = 5_000;
const MAX_BYTES = 5 * 1024;

/** fetch through the egress guard (EgressGuard.fetch). */
export type GuardedFetch = (url: string, init?: RequestInit) => Promise<Response>;

/** Whether a client id is a metadata document's URL: https, with a path (not the bare origin). */
export function isDocumentClientId(clientId: string): boolean {
  const url = URL.parse(clientId);
  return url !== null && url.protocol === 'https:' && url.pathname !== '/' && !url.hash;
}

/** The client the document at `clientId` describes; undefined when it cannot be fetched or is not acceptable (the SDK answers invalid_client). */
export async function fetchClientDocument(fetchVia: GuardedFetch, clientId: string): Promise<OAuthClientInformationFull | undefined> {
  let text: string;
  try {
    const res = await fetchVia(clientId, { signal: AbortSignal.timeout(TIMEOUT_MS), headers: { accept: 'application/json' } });
    if (res.status !== 200) return undefined;
    const declared = Number(res.headers.get('content-length') ?? 0);
    if (declared > MAX_BYTES) return undefined;
    text = await res.text();
    if (Buffer.byteLength(text) > MAX_BYTES) return undefined;
  } catch {
    return undefined;
  }
  let document: Record<string, unknown>;
  try {
    document = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (typeof document !== 'object' || document === null || document.client_id !== clientId) return undefined;
  // a public client: a document cannot hold a secret, nor ask for one
  if ('client_secret' in document || (document.token_endpoint_auth_method ?? 'none') !== 'none') return undefined;
  const parsed = OAuthClientMetadataSchema.safeParse(document);
  if (!parsed.success || parsed.data.redirect_uris.length === 0 || redirectUrisRefusal(parsed.data.redirect_uris) !== null)
    return undefined;
  return { ...parsed.data, client_id: clientId, token_endpoint_auth_method: 'none' };
}
