import { describe, expect, it } from 'vitest';
import { encodeTileIndex, parseTilePath, tilePath } from '../src/features/audit/tlog-tiles.ts';

describe('tlog-tiles paths', () => {
  it('writes an index as the format does: 3-digit elements, all but the last prefixed x', () => {
    expect(encodeTileIndex(0)).toBe('000');
    expect(encodeTileIndex(999)).toBe('999');
    expect(encodeTileIndex(1000)).toBe('x001/000');
    expect(encodeTileIndex(1234067)).toBe('x001/x234/067');
    expect(tilePath({ level: 'entries', index: 1234067, width: 5 })).toBe('tile/entries/x001/x234/067.p/5');
  });

  it('reads each tile in its one spelling, and nothing else', () => {
    expect(parseTilePath('0/x001/x234/067')).toEqual({ level: 0, index: 1234067, width: 256 });
    expect(parseTilePath('2/000.p/255')).toEqual({ level: 2, index: 0, width: 255 });
    expect(parseTilePath('entries/x001/000.p/1')).toEqual({ level: 'entries', index: 1000, width: 1 });
    for (const path of [
      '0/x000/001',
      '0/1',
      '0/0001',
      '0/000.p/256',
      '0/000.p/0',
      '0/000.p/07',
      '8/000',
      'x/000',
      '0/000/',
      '0//000',
      '0/000.p/',
    ])
      expect(parseTilePath(path), path).toBeUndefined();
  });
});
