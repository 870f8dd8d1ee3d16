/**
 * `warden witness`: runs a witness (src/witness/) until SIGINT or SIGTERM. Its key and state live
 * in --data-dir (created, mode 0700; the key file 0600), never in Warden's database or data
 * directory. It prints its vkey, which Warden takes in WARDEN_AUDIT_WITNESSES.
 */
import { once } from 'node:events';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { decodeBase64, exportSigningKey, generateSigningKey, loadSigningKey } from '../features/audit/checkpoint.ts';
import { Witness } from '../witness/witness.ts';
import { witnessServer } from '../witness/witness-http.ts';
import { UsageError } from './cli-errors.ts';

export interface WitnessArgs {
  name?: string | undefined;
  'data-dir'?: string | undefined;
  listen?: string | undefined;
  'log-key'?: string[] | undefined;
  'origin-prefix'?: string | undefined;
}

/** A log's public key: base64 Ed25519, or a file holding it or GET /audit/signing-key's JSON. */
function logKey(value: string): Buffer {
  let text = value.trim();
  if (decodeBase64(text)?.length !== 32 && existsSync(value)) {
    text = readFileSync(value, 'utf8').trim();
    if (text.startsWith('{')) {
      const parsed = JSON.parse(text) as { public_key?: unknown; data?: { public_key?: unknown } };
      text = String(parsed.public_key ?? parsed.data?.public_key ?? '');
    }
  }
  const key = decodeBase64(text);
  if (key?.length !== 32) throw new UsageError(`--log-key: not a base64 Ed25519 public key nor a file holding one: ${value}`);
  return Buffer.from(key);
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
  if (!existsSync(keyFile)) writeFileSync(keyFile, exportSigningKey(generateSigningKey()), { mode: 0o600, flag: 'wx' });
  const originPrefix = values['origin-prefix'] ?? 'warden/audit/';
  let witness: Witness;
  try {
    witness = new Witness({
      name: values.name,
      key: loadSigningKey(readFileSync(keyFile, 'utf8')),
      dataDir,
      logs: keys.map((key) => ({ originPrefix, publicKey: logKey(key) })),
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
