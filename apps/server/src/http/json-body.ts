/**
 * The JSON body reader of both APIs. It does what `express.json()` did for this service, with
 * less CPU per request (docs/decisions/0004-http-hot-path.md), and fails with ApiErrors:
 *
 * - Only a request that carries a body (Transfer-Encoding, or any Content-Length) of media type
 *   `application/json` is read; any other leaves `req.body` undefined, and the contract
 *   validator answers 415 where the operation takes a JSON body.
 * - UTF-8 only (RFC 8259 §8.1): another `charset` is 415 unsupported_media_type. A leading
 *   byte order mark is ignored; invalid UTF-8 sequences become U+FFFD.
 * - Content-Encoding gzip, deflate and br are inflated; another encoding is 415.
 * - At most `limitBytes` after inflating, else 413 payload_too_large (up front when the
 *   declared Content-Length says so). An empty body is `{}`, as express.json() had it.
 * - The body must be a JSON object or array, else 400 invalid_request.
 */
import { createBrotliDecompress, createGunzip, createInflate } from 'node:zlib';
import type { NextFunction, Request, Response } from 'express';
import { ApiError } from '../shared/errors.ts';

const INFLATERS: Record<string, () => NodeJS.ReadWriteStream> = {
  gzip: createGunzip,
  'x-gzip': createGunzip,
  deflate: createInflate,
  br: createBrotliDecompress,
};

/** Media type and charset of a Content-Type value (parameters may be quoted; names are case-insensitive). */
function parseContentType(value: string): { type: string; charset?: string } {
  const [type = '', ...parameters] = value.split(';');
  let charset: string | undefined;
  for (const parameter of parameters) {
    const eq = parameter.indexOf('=');
    if (eq > 0 && parameter.slice(0, eq).trim().toLowerCase() === 'charset') {
      charset = parameter
        .slice(eq + 1)
        .trim()
        .replace(/^"(.*)"$/, '$1')
        .toLowerCase();
    }
  }
  return { type: type.trim().toLowerCase(), charset };
}

export function jsonBody(limitBytes: number, limitText: string) {
  const tooLarge = () => new ApiError('payload_too_large', `The body exceeds ${limitText}`);
  return (req: Request, _res: Response, next: NextFunction) => {
    const { headers } = req;
    const declared = headers['content-length'];
    if (headers['transfer-encoding'] === undefined && declared === undefined) return next();
    const { type, charset } = parseContentType(headers['content-type'] ?? '');
    if (type !== 'application/json') return next();
    if (charset !== undefined && charset !== 'utf-8' && charset !== 'utf8') {
      return next(new ApiError('unsupported_media_type', `Unsupported charset "${charset}": the body must be UTF-8`));
    }
    const encoding = (headers['content-encoding'] ?? 'identity').trim().toLowerCase();
    const inflate = INFLATERS[encoding];
    if (!inflate && encoding !== 'identity') {
      return next(new ApiError('unsupported_media_type', `Unsupported content encoding "${encoding}"`));
    }
    if (declared !== undefined && !inflate && Number(declared) > limitBytes) return next(tooLarge());

    const source: NodeJS.ReadableStream = inflate ? req.pipe(inflate()) : req;
    const chunks: Buffer[] = [];
    let size = 0;
    let settled = false;
    const settle = (error?: ApiError) => {
      if (settled) return;
      settled = true;
      source.removeListener('data', onData);
      if (error) {
        // The rest of the body is read and discarded, so the answer can still be sent.
        if (inflate) req.unpipe();
        req.resume();
        return next(error);
      }
      next();
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limitBytes) return settle(tooLarge());
      chunks.push(chunk);
    };
    source.on('data', onData);
    source.on('error', () =>
      settle(new ApiError('invalid_request', inflate ? `The body is not valid ${encoding}` : 'The body could not be read')),
    );
    req.on('aborted', () => settle(new ApiError('invalid_request', 'The request was aborted')));
    source.on('end', () => {
      if (settled) return;
      let text = (chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks, size)).toString('utf8');
      if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
      const first = text.trimStart()[0];
      if (first === undefined) {
        req.body = {};
        return settle();
      }
      if (first !== '{' && first !== '[') return settle(new ApiError('invalid_request', 'The body must be a JSON object'));
      try {
        req.body = JSON.parse(text);
      } catch {
        return settle(new ApiError('invalid_request', 'The body is not valid JSON'));
      }
      settle();
    });
  };
}
