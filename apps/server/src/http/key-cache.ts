/**
 * The identities of recently used API keys, by key hash, so that a request costs no database
 * round trip to authenticate.
 *
 * What keeps it right: a trigger NOTIFYs `warden_identity` with the workspace id whenever a key
 * or its workspace row changes (revocation, permissions, rate limit, and the policy and agent
 * versions that the decision caches are keyed by); every server process LISTENs and drops that
 * workspace's entries. NOTIFY is transactional, so a change is announced once it is committed.
 * Changes made through this process are also dropped before their answer leaves
 * (`forgetWorkspace` from the router), so a caller always reads its own writes.
 *
 * What bounds a miss: while the listening connection is down, nothing is cached and every
 * request reads the database; entries live at most `ttlMs` (a backstop, not the mechanism);
 * a lookup that started before an invalidation is not cached after it (the epoch check).
 * Across processes a change is seen after the notification arrives (milliseconds), not in
 * the same instant: see the README's "Running several instances".
 * Unknown keys are never cached, so a new key works at once and guessing costs a lookup.
 *
 * The MCP gateway also accepts an agent's own key as the bearer (http/mcp-gateway.ts): what
 * such a bearer is — an agent's identity, or nothing (no workspace key, no agent's key) — is
 * kept apart (`getAgent`/`setAgent`; never answered by `get`), negatives included. A workspace's
 * notification drops its agents' entries and every negative one (a key given to one of its
 * agents was nobody's until then); another workspace's agent entries stay, since an agent key
 * belongs to one agent of all workspaces (docs/decisions/0019-agent-keys.md).
 */
import type { AuthContext } from '../shared/context.ts';

export const IDENTITY_CHANNEL = 'warden_identity';

export class KeyCache {
  private readonly entries = new Map<string, { identity: AuthContext; expiresAt: number }>();
  private readonly agents = new Map<string, { identity: AuthContext | null; expiresAt: number }>();
  private listening = false;
  private epoch = 0;

  constructor(
    private readonly ttlMs = 10_000,
    private readonly maxEntries = 10_000,
  ) {}

  /** The current epoch: pass it to `set` to cache what a lookup started now finds. */
  begin(): number {
    return this.epoch;
  }

  get(keyHash: string): AuthContext | undefined {
    const entry = this.entries.get(keyHash);
    if (!entry) return undefined;
    if (entry.expiresAt > Date.now()) return entry.identity;
    this.entries.delete(keyHash);
    return undefined;
  }

  set(keyHash: string, identity: AuthContext, startedAt: number): void {
    if (!this.listening || startedAt !== this.epoch) return;
    if (this.entries.size >= this.maxEntries) {
      // the oldest insertion goes first (a Map iterates in insertion order)
      const oldest = this.entries.keys().next().value;
      if (oldest !== undefined) this.entries.delete(oldest);
    }
    this.entries.set(keyHash, { identity, expiresAt: Date.now() + this.ttlMs });
  }

  /** An agent key sent as the bearer: its identity, null when it is known to be nobody's, undefined when not cached. */
  getAgent(keyHash: string): AuthContext | null | undefined {
    const entry = this.agents.get(keyHash);
    if (!entry) return undefined;
    if (entry.expiresAt > Date.now()) return entry.identity;
    this.agents.delete(keyHash);
    return undefined;
  }

  setAgent(keyHash: string, identity: AuthContext | null, startedAt: number): void {
    if (!this.listening || startedAt !== this.epoch) return;
    if (this.agents.size >= this.maxEntries) {
      const oldest = this.agents.keys().next().value;
      if (oldest !== undefined) this.agents.delete(oldest);
    }
    this.agents.set(keyHash, { identity, expiresAt: Date.now() + this.ttlMs });
  }

  forgetWorkspace(workspaceId: string): void {
    this.epoch++;
    for (const [keyHash, entry] of this.agents) {
      if (entry.identity === null || entry.identity.workspaceId === workspaceId) this.agents.delete(keyHash);
    }
    for (const [keyHash, entry] of this.entries) {
      if (entry.identity.workspaceId === workspaceId) this.entries.delete(keyHash);
    }
  }

  /** For Database.listen: notifications name a workspace; a lost connection empties the cache and stops caching until it is back. */
  readonly handlers = {
    notify: (workspaceId: string) => this.forgetWorkspace(workspaceId),
    state: (listening: boolean) => {
      this.epoch++;
      this.entries.clear();
      this.agents.clear();
      this.listening = listening;
    },
  };
}
