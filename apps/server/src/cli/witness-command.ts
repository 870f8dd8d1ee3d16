/**
 * `warden witness`: runs a witness (src/witness/) until SIGINT or SIGTERM. Its key and state live
 * in --data-dir (created, mode 0700; the key file 0600), never in Warden's database or data
 * directory. A new witness's key is ML-DSA-44 (what C2SP tlog-cosignature says new deployments
 * SHOULD use) unless --key-algorithm ed25519 asks for the older kind; an existing key file is kept
 * whatever its algorithm. It prints its vkey, which Warden takes in WARDEN_AUDIT_WITNESSES.
 */
import { once } from 'node:events';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { decodeBase64, exportSigningKey, generateSigningKey, type KeyAlgorithm, loadSigningKey } from '../features/audit/checkpoint.ts';
import { Witness } from '../witness/witness.ts';
import { witnessServer } from '../witness/witness-http.ts';
import { UsageError } from './cli-errors.ts';

export interface WitnessArgs {
  name?: string | undefined;
  'data-dir'?: string | undefined;
  listen?: string | undefined;
  'log-key'?: string[] | undefined;
  'origin-prefix'?: string | undefined;
  'key-algorithm'?: string | undefined;
}

/** Raw public key sizes of a log's keys: Ed25519, ML-DSA-44. */
const LOG_KEY_BYTES = [32, 1312];
const isLogKey = (text: string) => LOG_KEY_BYTES.includes(decodeBase64(text)?.length ?? 0);

interface SigningKeyJson {
  public_key?: unknown;
  ml_dsa_44?: { public_key?: unknown } | null;
}

/**
 * A log's public keys: base64 Ed25519 or ML-DSA-44, or a file holding one or GET
 * /audit/signing-key's JSON (both its keys: a checkpoint then verifies with either).
 */
function logKeys(value: string): Buffer[] {
  let texts = [value.trim()];
  if (!isLogKey(value.trim()) && existsSync(value)) {
    const text = readFileSync(value, 'utf8').trim();
    if (text.startsWith('{')) {
      const parsed = JSON.parse(text) as SigningKeyJson & { data?: SigningKeyJson };
      const keys = parsed.data ?? parsed;
      texts = [keys.public_key, keys.ml_dsa_44?.public_key].filter((key) => key !== undefined).map(String);
    } else texts = [text];
  }
  if (texts.length === 0 || !texts.every(isLogKey))
    throw new UsageError(`--log-key: not a base64 Ed25519 or ML-DSA-44 public key nor a file holding one: ${value}`);
  return texts.map((text) => Buffer.from(decodeBase64(text)!));
}

function keyAlgorithm(value = 'ml-dsa-44'): KeyAlgorithm {
  if (value !== 'ml-dsa-44' && value !== 'ed25519') throw new UsageError(`--key-algorithm: ml-dsa-44 or ed25519, not ${value}`);
  return value;
}

function listenAddress(value = '127.0.0.1:7380'): { host: string; port: number } {
  const match = /^(.*):(\d+)$/.exec(value);
  const port = Number(match?.[2]);
  if (!match || !Number.isInteger(port) || port > 65535) throw new UsageError(`--listen: not host:port: ${value}`);
  return { host: match[1]!.replace(/^\[(.*)\]$/, '$1'), port };
}

export async function runWitness(values: WitnessArgs, json: boolean): Promise<number> {
  const keys = values['log-key'] ?? [];
  if (!values.name || !values['data-dir'] || keys.length === 0)
    throw new UsageError('witness needs --name NAME --data-dir DIR --log-key KEY');
  const dataDir = values['data-dir'];
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const keyFile = join(dataDir, 'witness.key');
  const algorithm = keyAlgorithm(values['key-algorithm']);
  if (!existsSync(keyFile)) writeFileSync(keyFile, exportSigningKey(generateSigningKey(algorithm)), { mode: 0o600, flag: 'wx' });
  const originPrefix = values['origin-prefix'] ?? 'warden/audit/';
  let witness: Witness;
  try {
    witness = new Witness({
      name: values.name,
      key: loadSigningKey(readFileSync(keyFile, 'utf8')),
      dataDir,
      logs: keys.flatMap(logKeys).map((publicKey) => ({ originPrefix, publicKey })),
    });
  } catch (error) {
    if (error instanceof UsageError) throw error;
    throw new UsageError(`witness: ${(error as Error).message}`);
  }
  const { host, port } = listenAddress(values.listen);
  const server = witnessServer(witness, values.name);
  server.listen(port, host);
  await once(server, 'listening');
  const address = server.address();
  const bound = typeof address === 'object' && address ? address.port : port;
  const url = `http://${host.includes(':') ? `[${host}]` : host}:${bound}`;
  if (json) console.log(JSON.stringify({ name: values.name, vkey: witness.vkey, url, origin_prefix: originPrefix }));
  else console.log(`witness ${values.name} on ${url}, cosigning logs under ${originPrefix}\nvkey ${witness.vkey}`);
  await Promise.race([once(process, 'SIGTERM'), once(process, 'SIGINT')]);
  await new Promise<void>((done) => server.close(() => done()));
  return 0;
}
