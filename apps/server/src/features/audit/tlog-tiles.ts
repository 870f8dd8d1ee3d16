/**
 * A workspace's audit log as C2SP `tlog-tiles` (docs/decisions/0033-audit-log-tiles.md), read
 * from the Merkle tree Warden already keeps (tree.ts): a hash tile at level L holds the hashes of
 * the tree's nodes at height 8·L (level 0: the leaf hashes), 256 to a full tile, the first W of
 * them in a partial one (`.p/W`); an entry bundle holds the canonical bytes of the events the
 * leaves hash (SHA-256(0x00 ‖ bytes)), each prefixed by its length as a big-endian uint16.
 * A tile is served only once every node it holds is stored, so it never changes: full or partial,
 * it may be cached for good.
 */
import type { Kysely } from 'kysely';
import type { DB } from '../../db/schema.ts';
import { readNodes, sealsWithEvents } from './tree.repository.ts';
import { canonicalEvent, type EventFields } from './tree.ts';

/** Tree levels per tile level. */
export const TILE_HEIGHT = 8;
/** Hashes (or entries) in a full tile. */
export const TILE_WIDTH = 2 ** TILE_HEIGHT;
const HASH_BYTES = 32;
/** Tile levels of a tree of at most 2^63 leaves. */
const MAX_LEVEL = 7;

/** A tile asked for: hashes at `level`, or the entries; `width` TILE_WIDTH for a full tile. */
export interface TileRequest {
  level: number | 'entries';
  index: number;
  width: number;
}

/** A tile index as tlog-tiles writes it: 3-digit elements, all but the last prefixed `x` (1234067 → x001/x234/067). */
export function encodeTileIndex(index: number): string {
  const groups: string[] = [];
  let rest = index;
  do {
    groups.unshift(String(rest % 1000).padStart(3, '0'));
    rest = Math.floor(rest / 1000);
  } while (rest > 0);
  return groups.map((group, i) => (i < groups.length - 1 ? `x${group}` : group)).join('/');
}

/** The path of a tile under the log's prefix (`tile/0/x001/234.p/5`). */
export const tilePath = ({ level, index, width }: TileRequest) =>
  `tile/${level}/${encodeTileIndex(index)}${width < TILE_WIDTH ? `.p/${width}` : ''}`;

/** A tile path (after `tile/`) as a request, or undefined unless it is the one canonical way of writing a tile. */
export function parseTilePath(path: string): TileRequest | undefined {
  const match = /^(entries|[0-9])\/((?:x\d{3}\/)*\d{3})(?:\.p\/([1-9]\d{0,2}))?$/.exec(path);
  if (!match) return undefined;
  const level: TileRequest['level'] = match[1] === 'entries' ? 'entries' : Number(match[1]);
  const index = Number((match[2] as string).replaceAll('x', '').replaceAll('/', ''));
  const width = match[3] === undefined ? TILE_WIDTH : Number(match[3]);
  if ((level !== 'entries' && level > MAX_LEVEL) || width > TILE_WIDTH || !Number.isSafeInteger(index)) return undefined;
  const request: TileRequest = { level, index, width };
  // one spelling per tile (no `x000/` in front, no width 256 as `.p/256`): caches and monitors agree on names
  return tilePath(request) === `tile/${path}` ? request : undefined;
}

/** A hash tile's bytes, or undefined while any node it holds is not stored yet. */
async function hashTile(db: Kysely<DB>, workspaceId: string, level: number, index: number, width: number): Promise<Buffer | undefined> {
  const first = index * TILE_WIDTH;
  const nodes = await readNodes(
    db,
    Array.from({ length: width }, (_, i) => ({ workspace_id: workspaceId, level: level * TILE_HEIGHT, node_index: first + i })),
  );
  if (nodes.length < width || nodes.some((node) => node.hash === null)) return undefined;
  const tile = Buffer.alloc(width * HASH_BYTES);
  nodes
    .sort((a, b) => a.node_index - b.node_index)
    .forEach((node, i) => {
      tile.write(node.hash as string, i * HASH_BYTES, 'hex');
    });
  return tile;
}

/** An entry bundle's bytes, or undefined while any of its events is not sealed yet. */
async function entryBundle(db: Kysely<DB>, workspaceId: string, index: number, width: number): Promise<Buffer | undefined> {
  const rows = await sealsWithEvents(db, workspaceId, index * TILE_WIDTH, width);
  if (rows.length < width) return undefined;
  const parts: Buffer[] = [];
  for (const row of rows) {
    if (row.id === null) throw new Error(`the event sealed at ${row.sequence} of workspace ${workspaceId} is missing`);
    const bytes = Buffer.from(canonicalEvent(row as EventFields), 'utf8');
    // the format's lengths are 16-bit; events are bounded far below (LIMITS), so this is a broken row
    if (bytes.length > 0xffff) throw new Error(`the event sealed at ${row.sequence} is longer than an entry bundle can carry`);
    const length = Buffer.alloc(2);
    length.writeUInt16BE(bytes.length);
    parts.push(length, bytes);
  }
  return Buffer.concat(parts);
}

/** A tile of the workspace's log, or undefined when it does not exist (yet). */
export function readTile(db: Kysely<DB>, workspaceId: string, request: TileRequest): Promise<Buffer | undefined> {
  return request.level === 'entries'
    ? entryBundle(db, workspaceId, request.index, request.width)
    : hashTile(db, workspaceId, request.level, request.index, request.width);
}
