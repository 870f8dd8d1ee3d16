/**
 * Agent keys Warden generates: `wak_<public id>_<secret>`, the public id 16 hex characters (64
 * random bits, unique, names the agent without a lookup by secret), the secret 32 random bytes
 * in base64url (256 bits). Only the SHA-256 of the whole key is stored. Caller-chosen keys are
 * any other string (docs/decisions/0019-agent-keys.md).
 */
import { randomBytes, timingSafeEqual } from 'node:crypto';
import { hashSecret } from '../../shared/crypto.ts';

const GENERATED = /^wak_([0-9a-f]{16})_[A-Za-z0-9_-]{43}$/;

export interface GeneratedAgentKey {
  key: string;
  publicId: string;
  hash: string;
}

export function generateAgentKey(): GeneratedAgentKey {
  const publicId = randomBytes(8).toString('hex');
  const key = `wak_${publicId}_${randomBytes(32).toString('base64url')}`;
  return { key, publicId, hash: hashSecret(key) };
}

/** The public id of a key in the generated form; undefined for any other string. */
export const publicIdOf = (key: string) => GENERATED.exec(key)?.[1];

/** What listings show of a generated key: its public part only. */
export const agentKeyHint = (publicId: string | null) => (publicId === null ? null : `wak_${publicId}_…`);

/** Whether two hex SHA-256 hashes are equal, in constant time. */
export function sameHash(a: string, b: string): boolean {
  const left = Buffer.from(a, 'hex');
  const right = Buffer.from(b, 'hex');
  return left.length === 32 && right.length === 32 && timingSafeEqual(left, right);
}
