/**
 * Signed notes and checkpoints (checkpoint.ts): the published vectors of C2SP signed-note and of
 * Go's golang.org/x/mod/sumdb/note (the reference implementation), the frozen checkpoint format,
 * round trips and every rejection.
 */
import { createHash, generateKeyPairSync } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import {
  AuditProofError,
  type AuditProofErrorCode,
  exportSigningKey,
  formatCheckpoint,
  formatVerifierKey,
  generateSigningKey,
  keyId,
  loadSigningKey,
  noteSigner,
  openCheckpoint,
  openNote,
  parseCheckpoint,
  parseVerifierKey,
  signCheckpoint,
  signNote,
} from '../src/features/audit/checkpoint.ts';
import { Frontier, leafHash } from '../src/features/audit/merkle.ts';

const rejects = (code: AuditProofErrorCode, fn: () => unknown) => {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(AuditProofError);
    expect((error as AuditProofError).code).toBe(code);
    return;
  }
  throw new Error(`expected a AuditProofError ${code}`);
};

// c2sp.org/signed-note, "Verifier keys / Example".
const SPEC_VKEY = 'example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k';
const SPEC_NOTE =
  'This is an example message.\n\n— example.com/foo Uw2QOkn8srV1yJGh2VYRlL1Tnagv1YEq6TfXppzi2ONncAlTgK7Ztg1ERYNZXsYjOBH3mFXmRKuwHjG1Yu72IneyaQM=\n';

// The example of golang.org/x/mod/sumdb/note's package documentation: a private key, so signing is checked too.
const GO_SKEY = 'PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz';
const GO_VKEY = 'PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW';
const GO_TEXT = "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n";
const GO_NOTE = `${GO_TEXT}\n— PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n`;

// This project's frozen vector (also quoted in checkpoint.ts): a fixed seed, origin, tree and time.
const SEED = Buffer.alloc(32, 7).toString('base64');
const ORIGIN = 'warden/audit/0b6f2f4e-5d1c-4a55-9d0e-6f2b8c1e7a10';
const VKEY = 'warden/audit/0b6f2f4e-5d1c-4a55-9d0e-6f2b8c1e7a10+48034a3c+AepKbGPinFIKvvVQexMuxfmVR3auvr57kkIe6mkURtIs';
const TIME = new Date('2026-01-02T03:04:05Z');
const BODY = `${ORIGIN}\n42\nsV/ZxKUjUFToxHJMzaCss838Z0c1h8JHWfDVsLfEZQ8=\ntime 1767323045\n`;
const NOTE = `${BODY}\n— ${ORIGIN} SANKPAA0yt2wYn5k/ReHqmfMq+KpYI3Cn5vCigdrbqLCVNjxCDV3rXu4UqzjYFzOSetQO4eVidjWqaBYuysUCylv9wE=\n`;

const root42 = () => {
  const frontier = new Frontier();
  for (let i = 0; i < 42; i++) frontier.append(leafHash(Buffer.from(`event ${i}`)));
  return frontier.root();
};

describe('published signed-note vectors', () => {
  it('the C2SP signed-note example verifies with its vkey', () => {
    const opened = openNote(SPEC_NOTE, SPEC_VKEY);
    expect(opened.text).toBe('This is an example message.\n');
    expect(opened.verified).toHaveLength(1);
    expect(opened.verified[0]).toMatchObject({ name: 'example.com/foo', keyId: 0x530d903a });
  });

  it('Go’s example: the private key gives the vkey, and signing gives the published note byte for byte', () => {
    const key = loadSigningKey(GO_SKEY);
    const signer = noteSigner(key, 'PeterNeumann');
    expect(signer.vkey).toBe(GO_VKEY);
    expect(signer.keyId).toBe(0xc74f20a3);
    expect(signNote(GO_TEXT, signer)).toBe(GO_NOTE);
    expect(openNote(GO_NOTE, GO_VKEY).text).toBe(GO_TEXT);
  });

  it('the key id is SHA-256(name ‖ 0x0A ‖ 0x01 ‖ public key)[:4]', () => {
    const verifier = parseVerifierKey(GO_VKEY);
    const digest = createHash('sha256')
      .update(Buffer.concat([Buffer.from('PeterNeumann\n'), Buffer.of(1), verifier.publicKey]))
      .digest();
    expect(keyId('PeterNeumann', verifier.publicKey)).toBe(digest.readUInt32BE(0));
    expect(formatVerifierKey('PeterNeumann', verifier.publicKey)).toBe(GO_VKEY);
  });

  it('a C2SP tlog-checkpoint example body parses', () => {
    expect(parseCheckpoint('example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n')).toEqual({
      origin: 'example.com/behind-the-sofa',
      size: 20852163,
      rootHash: Buffer.from('CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=', 'base64'),
      time: undefined,
      extensions: [],
    });
  });
});

describe('checkpoints', () => {
  const key = loadSigningKey(SEED);
  const signer = noteSigner(key, ORIGIN);

  it('the frozen vector: body, vkey and signed note', () => {
    expect(signer.vkey).toBe(VKEY);
    expect(formatCheckpoint({ origin: ORIGIN, size: 42, rootHash: root42(), time: TIME })).toBe(BODY);
    expect(signCheckpoint({ origin: ORIGIN, size: 42, rootHash: root42(), time: TIME }, signer)).toBe(NOTE);
  });

  it('round trip: format → sign → open gives the checkpoint back', () => {
    const opened = openCheckpoint(NOTE, VKEY, { origin: ORIGIN });
    expect(opened).toMatchObject({ origin: ORIGIN, size: 42, time: TIME, extensions: [] });
    expect(opened.rootHash.equals(root42())).toBe(true);
    expect(opened.note.verified.map((s) => s.name)).toEqual([ORIGIN]);

    const fresh = generateSigningKey();
    const s = noteSigner(fresh, 'example.com/log');
    const note = signCheckpoint({ origin: 'example.com/log', size: 0, rootHash: Buffer.alloc(32), extensions: ['x y z'] }, s);
    expect(openCheckpoint(note, s.vkey)).toMatchObject({ origin: 'example.com/log', size: 0, time: undefined, extensions: ['x y z'] });
  });

  it('the time keeps whole seconds, and a time line anywhere among the extensions is read', () => {
    expect(formatCheckpoint({ origin: 'o', size: 1, rootHash: Buffer.alloc(32), time: new Date(1999) })).toMatch(/\ntime 1\n$/);
    expect(parseCheckpoint(`o\n1\n${Buffer.alloc(32).toString('base64')}\nfoo\ntime 5\n`)).toMatchObject({
      time: new Date(5000),
      extensions: ['foo'],
    });
  });

  it('a tampered body or signature fails', () => {
    rejects('bad_signature', () => openCheckpoint(NOTE.replace('\n42\n', '\n43\n'), VKEY));
    rejects('bad_signature', () => openCheckpoint(NOTE.replace('time 1767323045', 'time 1767323046'), VKEY));
    rejects('bad_signature', () => openCheckpoint(NOTE.replace('sV/Z', 'sV/Y'), VKEY));
    rejects('bad_signature', () => openCheckpoint(NOTE.replace('wE=\n', 'wA=\n'), VKEY));
    // A removed time line is a change of the signed text too.
    rejects('bad_signature', () => openCheckpoint(NOTE.replace('time 1767323045\n', ''), VKEY));
  });

  it('other keys: unknown signatures are ignored, a note with none known fails', () => {
    const witness = noteSigner(generateSigningKey(), 'witness.example/w1');
    const cosigned = signNote(BODY, signer, witness);
    const opened = openCheckpoint(cosigned, VKEY);
    expect(opened.note.unverified.map((s) => s.name)).toEqual(['witness.example/w1']);
    expect(openNote(cosigned, [VKEY, witness.vkey]).verified).toHaveLength(2);
    rejects('unknown_key', () => openCheckpoint(NOTE, witness.vkey));
    // Same name, another key: its key id differs, so it is another key, not a bad signature.
    rejects('unknown_key', () => openCheckpoint(NOTE, noteSigner(generateSigningKey(), ORIGIN).vkey));
    rejects('origin_mismatch', () => openCheckpoint(NOTE, VKEY, { origin: 'warden/audit/other' }));
  });

  it('malformed notes', () => {
    rejects('malformed_note', () => openNote(BODY, VKEY));
    rejects('malformed_note', () => openNote(NOTE.slice(0, -1), VKEY));
    rejects('malformed_note', () => openNote(NOTE.replace('— ', '- '), VKEY));
    rejects('malformed_note', () => openNote(NOTE.replace('42', '4\t2'), VKEY));
    rejects('malformed_note', () => openNote(NOTE.replace('SANK', 'SA*K'), VKEY));
    rejects('malformed_note', () => openNote(`${NOTE}— ${ORIGIN} AAAA\n`, VKEY));
    rejects('malformed_note', () => openNote(`${BODY}\n${`— x AAAAAAAA\n`.repeat(101)}`, VKEY));
    rejects('malformed_note', () => signNote('no final newline', signer));
  });

  it('malformed checkpoints', () => {
    const root = Buffer.alloc(32).toString('base64');
    for (const text of [
      `o\n1\n`,
      `o\n01\n${root}\n`,
      `o\n-1\n${root}\n`,
      `o\n1e3\n${root}\n`,
      `o\n${2 ** 53}\n${root}\n`,
      `o\n1\n${root.slice(0, -1)}\n`,
      `o\n1\nAAAA\n`,
      `o\n1\n${root}\n\n`,
      `o\n1\n${root}\ntime 1\ntime 2\n`,
      `\n1\n${root}\n`,
      `o\n1\n${root}`,
    ])
      rejects('malformed_checkpoint', () => parseCheckpoint(text));
    rejects('malformed_checkpoint', () => formatCheckpoint({ origin: 'a\nb', size: 1, rootHash: Buffer.alloc(32) }));
    rejects('malformed_checkpoint', () => formatCheckpoint({ origin: 'o', size: -1, rootHash: Buffer.alloc(32) }));
    rejects('malformed_checkpoint', () => formatCheckpoint({ origin: 'o', size: 1.5, rootHash: Buffer.alloc(32) }));
    rejects('malformed_checkpoint', () => formatCheckpoint({ origin: 'o', size: 1, rootHash: Buffer.alloc(31) }));
    rejects('malformed_checkpoint', () => formatCheckpoint({ origin: 'o', size: 1, rootHash: Buffer.alloc(32), extensions: [''] }));
    rejects('malformed_checkpoint', () => formatCheckpoint({ origin: 'o', size: 1, rootHash: Buffer.alloc(32), extensions: ['time 3'] }));
    rejects('malformed_checkpoint', () =>
      formatCheckpoint({ origin: 'o', size: 1, rootHash: Buffer.alloc(32), time: new Date(Number.NaN) }),
    );
  });
});

describe('keys', () => {
  it('loads PEM, base64 PKCS#8, a base64 seed and Go’s private key form: the same key', () => {
    const { privateKey } = generateKeyPairSync('ed25519');
    const pem = privateKey.export({ format: 'pem', type: 'pkcs8' }).toString();
    const fromPem = loadSigningKey(pem);
    const exported = exportSigningKey(fromPem);
    expect(exported).not.toContain('\n');
    expect(loadSigningKey(exported).publicKey.equals(fromPem.publicKey)).toBe(true);
    const seed = privateKey.export({ format: 'jwk' }).d!;
    expect(loadSigningKey(Buffer.from(seed, 'base64url').toString('base64')).publicKey.equals(fromPem.publicKey)).toBe(true);
    expect(noteSigner(loadSigningKey(GO_SKEY), 'PeterNeumann').vkey).toBe(GO_VKEY);
  });

  it('rejects what is not an Ed25519 private key', () => {
    const rsa = generateKeyPairSync('rsa', { modulusLength: 1024 }).privateKey.export({ format: 'pem', type: 'pkcs8' }).toString();
    for (const value of [
      '',
      'nope',
      Buffer.alloc(31).toString('base64'),
      rsa,
      GO_SKEY.replace('c74f20a3', 'c74f20a4'),
      GO_SKEY.replace('+AY', '+AZ'),
    ])
      rejects('invalid_argument', () => loadSigningKey(value));
  });

  it('rejects bad key names and vkeys', () => {
    const key = generateSigningKey();
    for (const name of ['', 'a b', 'a+b', 'a\u00a0b', 'a\nb']) rejects('invalid_argument', () => noteSigner(key, name));
    for (const vkey of [
      'PeterNeumann+c74f20a3',
      'PeterNeumann+c74f20a4+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW',
      'PeterNeumann+C74F20A3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW',
      'PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10T',
      // Go's note_test.go: a wrong-length key and an unknown algorithm, each with a matching key id.
      'PeterNeumann+cc469956+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TWBADKEY==',
      'PeterNeumann+173116ae+ZRpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW',
    ])
      rejects('invalid_argument', () => parseVerifierKey(vkey));
  });
});
