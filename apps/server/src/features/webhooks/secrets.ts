/**
 * Encryption of stored secrets (webhook signing secrets): AES-256-GCM under a master key, so
 * the database never holds them in plaintext. The master key comes from WARDEN_MASTER_KEY
 * (base64 of 32 bytes; required when several machines share one database), or else from
 * `master.key` in the data directory, created on first start (mode 0600). An in-memory
 * database gets a throw-away key.
 */
import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import { readOrCreateSecretFile } from '../../db/data-dir-lock.ts';

export interface SecretBox {
  seal(plaintext: string): string;
  open(sealed: string): string;
}

export function loadMasterKey(env: string | undefined, dataDir: string): Buffer {
  if (env) {
    const key = Buffer.from(env, 'base64');
    if (key.length !== 32) throw new Error('WARDEN_MASTER_KEY must be the base64 of 32 bytes');
    return key;
  }
  const stored = readOrCreateSecretFile(dataDir, 'master.key', () => randomBytes(32).toString('base64'));
  return stored === undefined ? randomBytes(32) : loadMasterKey(stored, dataDir);
}

export function createSecretBox(key: Buffer): SecretBox {
  return {
    seal(plaintext) {
      const iv = randomBytes(12);
      const cipher = createCipheriv('aes-256-gcm', key, iv);
      const body = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
      return `v1.${iv.toString('base64url')}.${cipher.getAuthTag().toString('base64url')}.${body.toString('base64url')}`;
    },
    open(sealed) {
      const [version, iv, tag, body] = sealed.split('.');
      if (version !== 'v1' || !iv || !tag || body === undefined) throw new Error('not a sealed secret');
      const decipher = createDecipheriv('aes-256-gcm', key, Buffer.from(iv, 'base64url'));
      decipher.setAuthTag(Buffer.from(tag, 'base64url'));
      return Buffer.concat([decipher.update(Buffer.from(body, 'base64url')), decipher.final()]).toString('utf8');
    },
  };
}

/** `whsec_` + base64 of 32 random bytes (Standard Webhooks' secret format). */
export const generateWebhookSecret = () => `whsec_${randomBytes(32).toString('base64')}`;
