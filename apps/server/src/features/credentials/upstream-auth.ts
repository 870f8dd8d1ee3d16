/**
 * A brokered upstream secret: one header Warden sends for its callers (a bearer token or an
 * API-key header). Sealed with the master key before it is stored (webhooks/secrets.ts, as
 * webhook secrets are), opened only where a request upstream is built, shown as a hint.
 */
import type { UpstreamAuth, UpstreamAuthInputWritable as UpstreamAuthInput } from '@warden/contract';
import { ApiError } from '../../shared/errors.ts';
import type { SecretBox } from '../webhooks/secrets.ts';

/** Headers a brokered secret may not be sent in: they never travel, or they mean something to Warden. */
const RESERVED_HEADERS = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'host',
  'content-length',
  'content-type',
  'expect',
  'accept',
  'mcp-session-id',
  'mcp-protocol-version',
  'last-event-id',
]);

/** What is stored of a secret: sealed, with the header it goes in and its hint. */
export interface SealedAuth {
  auth_type: UpstreamAuth['type'];
  auth_header: string;
  secret_encrypted: string;
  hint: string;
}

/** `…` and the last four characters, or `…` alone for a secret too short to show any of. */
export const hintOf = (secret: string) => (secret.length >= 12 ? `…${secret.slice(-4)}` : '…');

/** Checks and seals an input (400 invalid_request naming the field `at` for a header the schema cannot refuse). */
export function sealAuth(box: SecretBox, input: UpstreamAuthInput, at: string): SealedAuth {
  if (input.secret.trim() === '') throw new ApiError('invalid_request', `${at}.secret must not be empty`);
  let header = 'authorization';
  if (input.type === 'bearer') {
    if (input.header !== undefined && input.header.toLowerCase() !== 'authorization')
      throw new ApiError('invalid_request', `${at}.header: a bearer secret travels in Authorization; use type 'header' for another header`);
  } else {
    if (input.header === undefined) throw new ApiError('invalid_request', `${at}.header is required for type 'header'`);
    header = input.header.toLowerCase();
    if (RESERVED_HEADERS.has(header) || header.startsWith('x-warden-'))
      throw new ApiError('invalid_request', `${at}.header: '${input.header}' cannot carry a credential`);
  }
  return { auth_type: input.type, auth_header: header, secret_encrypted: box.seal(input.secret), hint: hintOf(input.secret) };
}

/** The header as sent: its lower-case name and value (the bearer scheme added). */
export function openAuth(box: SecretBox, type: string, header: string, sealed: string): [string, string] {
  const secret = box.open(sealed);
  return [header, type === 'bearer' ? `Bearer ${secret}` : secret];
}

export const authView = (type: string, header: string, hint: string): UpstreamAuth => ({
  type: type as UpstreamAuth['type'],
  header,
  hint,
});
