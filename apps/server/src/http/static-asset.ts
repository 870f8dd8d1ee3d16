/**
 * A file served as it is stored: compressed once per encoding (brotli, gzip), off the event
 * loop, when a client first asks for it, then sent in the encoding each client accepts, with an
 * ETag so that a revalidation is a 304. For the large answers that never change while the
 * server runs: the API reference's bundle, the bundled spec, the dashboard's files.
 */
import { createHash } from 'node:crypto';
import { promisify } from 'node:util';
import { brotliCompress, constants, gzip } from 'node:zlib';
import type { Request, Response } from 'express';

/** Below this, compression saves less than it costs the client to undo. */
const MIN_COMPRESSED_BYTES = 1024;

type Compressed = 'br' | 'gzip';

const compressors: Record<Compressed, (body: Buffer) => Promise<Buffer>> = {
  br: (body) =>
    promisify(brotliCompress)(body, {
      params: { [constants.BROTLI_PARAM_QUALITY]: 9, [constants.BROTLI_PARAM_SIZE_HINT]: body.length },
    }),
  gzip: (body) => promisify(gzip)(body, { level: 9 }),
};

export class StaticAsset {
  private readonly body: Buffer;
  private readonly etag: string;
  private readonly encoded: Partial<Record<Compressed, Promise<Buffer>>> = {};

  constructor(
    body: Buffer | string,
    private readonly contentType: string,
  ) {
    this.body = typeof body === 'string' ? Buffer.from(body) : body;
    this.etag = `"${createHash('sha256').update(this.body).digest('base64url').slice(0, 27)}"`;
  }

  async send(req: Request, res: Response): Promise<void> {
    res.setHeader('Vary', 'Accept-Encoding');
    res.setHeader('ETag', this.etag);
    res.setHeader('Content-Type', this.contentType);
    if (req.fresh) {
      res.status(304).end();
      return;
    }
    // Brotli whenever accepted (it is smaller), whatever order the client lists encodings in.
    const accepted = this.body.length < MIN_COMPRESSED_BYTES ? undefined : (['br', 'gzip'] as const).find((e) => req.acceptsEncodings(e));
    if (!accepted) {
      res.end(this.body);
      return;
    }
    this.encoded[accepted] ??= compressors[accepted](this.body);
    const body = await this.encoded[accepted];
    res.setHeader('Content-Encoding', accepted);
    res.end(body);
  }
}
