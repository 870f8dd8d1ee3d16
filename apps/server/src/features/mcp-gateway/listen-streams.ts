/**
 * `subscriptions/listen` (revision 2026-07-28): the v2 SDK serves the streams; what feeds them
 * is what Warden's upstreams announce (list changes, resource updates) on the sessions Warden
 * keeps for 2026-07-28 requests. A stream is scoped when it opens, to the workspace and the
 * endpoint it was opened on; an upstream's change reaches the streams of that workspace's
 * endpoints that show the server (its own and the aggregate), never another workspace's.
 * Streams live in the process that serves them; a change one process hears is told to its own
 * streams and broadcast to the other processes, which tell theirs (LISTEN_TOPIC, through the
 * client sessions' relay channel). As a session's GET
 * stream, a listen stream whose caller may no longer act (its key revoked, its agent
 * deactivated) is ended at the next check.
 */
import type { ServerNotification } from '@modelcontextprotocol/sdk/types.js';
import type { ServerEvent, ServerEventBus } from '@modelcontextprotocol/server';
import type { McpTarget } from '../execution/mcp-dialer.ts';
import { NAMESPACE_SEPARATOR } from './gateway-answers.ts';

/** Where a stream was opened: its workspace, and its one server (null: the aggregate); and how it is checked and ended. */
export interface ListenScope {
  workspaceId: string;
  single: McpTarget | null;
  stillAllowed?: () => Promise<boolean>;
  end?: () => void;
}

interface Stream extends ListenScope {
  listener: (event: ServerEvent) => void;
}

/** The relay broadcast that carries a change to the other processes' streams. */
export const LISTEN_TOPIC = 'listen';

/** What a change names of the server it came from (all that a stream's scope and a URI's prefix need). */
export type ListenTarget = Pick<McpTarget, 'id' | 'workspace_id' | 'slug'>;

const LIST_CHANGES: Record<string, Exclude<ServerEvent['kind'], 'resource_updated'>> = {
  'notifications/tools/list_changed': 'tools_list_changed',
  'notifications/prompts/list_changed': 'prompts_list_changed',
  'notifications/resources/list_changed': 'resources_list_changed',
};

export class ListenStreams implements ServerEventBus {
  private readonly streams = new Set<Stream>();
  /** Asks each stream's caller again, every `checkMs`, while there are streams. */
  private checker?: NodeJS.Timeout;

  /** `scope` says where the request being served was made (the SDK subscribes a stream while serving it). */
  constructor(
    private readonly scope: () => ListenScope | undefined,
    private readonly checkMs: number,
  ) {}

  /** A check is running (a slow one is not overtaken by the next). */
  private checking = false;

  /** Ends the streams whose caller may no longer act. */
  private async check(): Promise<void> {
    if (this.checking) return;
    this.checking = true;
    try {
      await this.checkEach();
    } finally {
      this.checking = false;
    }
  }

  private async checkEach(): Promise<void> {
    for (const stream of [...this.streams]) {
      const allowed = stream.stillAllowed ? await stream.stillAllowed().catch(() => false) : true;
      if (allowed) continue;
      this.streams.delete(stream);
      stream.end?.();
    }
    if (this.streams.size === 0) {
      clearInterval(this.checker);
      this.checker = undefined;
    }
  }

  /** Nothing is told every stream: an upstream's change goes to the streams that show its server (changed). */
  publish(): void {}

  subscribe(listener: (event: ServerEvent) => void): () => void {
    const scope = this.scope();
    if (!scope) return () => undefined;
    const stream: Stream = { ...scope, listener };
    this.streams.add(stream);
    this.checker ??= setInterval(() => void this.check(), this.checkMs).unref();
    return () => this.streams.delete(stream);
  }

  /** What `target` announced on one of Warden's sessions, told to the streams here that show it; false when it is no change a stream hears of. */
  changed(target: ListenTarget, notification: ServerNotification): boolean {
    const listChange = LIST_CHANGES[notification.method];
    const updated = notification.method === 'notifications/resources/updated' ? String(notification.params?.uri) : undefined;
    if (!listChange && updated === undefined) return false;
    for (const stream of this.streams) {
      if (stream.workspaceId !== target.workspace_id || (stream.single && stream.single.id !== target.id)) continue;
      // on the aggregate a URI carries its server's prefix, as its listing did
      const uri = updated === undefined || stream.single ? updated : `${target.slug}${NAMESPACE_SEPARATOR}${updated}`;
      stream.listener(listChange ? { kind: listChange } : { kind: 'resource_updated', uri: uri as string });
    }
    return true;
  }
}
