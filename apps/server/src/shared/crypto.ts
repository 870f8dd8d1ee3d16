/** Hashing of secrets (API keys, agent keys, session tokens): only their SHA-256 is stored and compared. */
import { hash } from 'node:crypto';

/** One-shot: no Hash object (and its weak handle for the scavenger) per authenticated request. */
export const hashSecret = (secret: string) => hash('sha256', secret, 'hex');
