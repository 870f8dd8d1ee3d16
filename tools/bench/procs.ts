/**
 * Child processes of the benchmark and what /proc tells about them: CPU time (utime+stime),
 * resident memory (VmRSS, VmHWM), the machine's CPU busy time, and the process tree (to find
 * the real server under `npx tsx`). Every child started here is registered and ended by
 * `stopAll`, by its own pid (or the process group it leads), never by name.
 */
import { type ChildProcess, execFileSync, fork, type Serializable, type SpawnOptions, spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';

export const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const HERE = fileURLToPath(new URL('./', import.meta.url));

export const CLK_TCK = (() => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK']).toString().trim()) || 100;
  } catch {
    return 100;
  }
})();

/** CPU time of one process so far, in ms: user and system (kernel). */
export function cpuTimes(pid: number): { user: number; system: number } {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // After "pid (comm) ": field 3 (state) is index 0, so utime (14) is 11 and stime (15) is 12.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return { user: (Number(fields[11]) * 1000) / CLK_TCK, system: (Number(fields[12]) * 1000) / CLK_TCK };
}

/** CPU time (user + system) of one process so far, in ms. */
export function cpuMs(pid: number): number {
  const { user, system } = cpuTimes(pid);
  return user + system;
}

function parentOf(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
  } catch {
    return undefined;
  }
}

/** VmRSS and VmHWM (peak RSS since start) of a process, in MB. */
export function memoryMb(pid: number): { rss: number; hwm: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? Number.NaN);
  return { rss: kb('VmRSS') / 1024, hwm: kb('VmHWM') / 1024 };
}

/** Busy and total jiffies of the whole machine (first line of /proc/stat). */
export function machineTicks(): { busy: number; total: number } {
  const line = readFileSync('/proc/stat', 'utf8').split('\n')[0] ?? '';
  const values = line.trim().split(/\s+/).slice(1).map(Number);
  const total = values.reduce((a, b) => a + b, 0);
  const idle = (values[3] ?? 0) + (values[4] ?? 0); // idle + iowait
  return { busy: total - idle, total };
}

/** All descendants of a process, with their depth below it. */
export function descendants(root: number): Array<{ pid: number; depth: number; cmdline: string }> {
  const children = new Map<number, number[]>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const pid = Number(entry);
    const parent = parentOf(pid);
    if (parent === undefined) continue;
    const list = children.get(parent) ?? [];
    list.push(pid);
    children.set(parent, list);
  }
  const found: Array<{ pid: number; depth: number; cmdline: string }> = [];
  const walk = (pid: number, depth: number) => {
    for (const child of children.get(pid) ?? []) {
      let cmdline = '';
      try {
        cmdline = readFileSync(`/proc/${child}/cmdline`, 'utf8').replaceAll('\0', ' ').trim();
      } catch {
        continue;
      }
      found.push({ pid: child, depth, cmdline });
      walk(child, depth + 1);
    }
  };
  walk(root, 1);
  return found;
}

export async function freePort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const address = probe.address();
  await new Promise<void>((resolve) => probe.close(() => resolve()));
  if (!address || typeof address === 'string') throw new Error('no port');
  return address.port;
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

interface Tracked {
  child: ChildProcess;
  name: string;
  /** Leads its own process group (spawned detached): ended as a group. */
  group: boolean;
}

const started = new Set<Tracked>();
/** Every child ever started here (kept after exit, to end what is left of its group). */
const known = new WeakMap<ChildProcess, Tracked>();
let shuttingDown = false;

/** From now on no child may be started (the run is being stopped). */
export function refuseNewChildren(): void {
  shuttingDown = true;
}

function assertRunning(name: string): void {
  if (shuttingDown) throw new Error(`not starting ${name}: the benchmark is stopping`);
}

const alive = (child: ChildProcess) => child.exitCode === null && child.signalCode === null;

/** Forks one of the benchmark's own TypeScript files (tools/bench/<file>) under tsx, with IPC. */
export function forkBench(file: string, name: string, args: string[] = [], env: NodeJS.ProcessEnv = {}): ChildProcess {
  assertRunning(name);
  const child = fork(`${HERE}${file}`, args, {
    cwd: ROOT,
    execArgv: ['--import', 'tsx'],
    stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
    env: { ...process.env, NODE_OPTIONS: '', ...env },
  });
  // Children never write to our stdout: its last line is the JSON result.
  child.stdout?.on('data', (chunk: Buffer) => process.stderr.write(prefix(name, chunk)));
  child.stderr?.on('data', (chunk: Buffer) => process.stderr.write(prefix(name, chunk)));
  track(child, name, false);
  return child;
}

/** Spawns a command as the leader of a new process group (so the whole tree can be ended). */
export function spawnGroup(command: string, args: string[], name: string, options: SpawnOptions): ChildProcess {
  assertRunning(name);
  const child = spawn(command, args, { ...options, detached: true });
  track(child, name, true);
  return child;
}

function track(child: ChildProcess, name: string, group: boolean): void {
  const entry = { child, name, group };
  started.add(entry);
  known.set(child, entry);
  child.once('exit', () => started.delete(entry));
}

function prefix(name: string, chunk: Buffer): string {
  return chunk
    .toString('utf8')
    .split('\n')
    .filter((line) => line.length > 0)
    .map((line) => `[${name}] ${line}\n`)
    .join('');
}

function signal(entry: Tracked, sig: NodeJS.Signals): void {
  const pid = entry.child.pid;
  if (pid === undefined) return;
  try {
    if (entry.group) process.kill(-pid, sig);
    else entry.child.kill(sig);
  } catch {
    // already gone
  }
}

/** Ends one child: `first` (SIGTERM by default), then SIGKILL after `graceMs`. */
export async function stopChild(child: ChildProcess, first: NodeJS.Signals = 'SIGTERM', graceMs = 5_000): Promise<void> {
  const entry = known.get(child) ?? { child, name: 'child', group: false };
  if (!alive(child)) {
    // The group leader may be gone while members still run.
    if (entry.group) signal(entry, 'SIGKILL');
    return;
  }
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  signal(entry, first);
  const timer = setTimeout(() => signal(entry, 'SIGKILL'), graceMs);
  await exited;
  clearTimeout(timer);
  if (entry.group) signal(entry, 'SIGKILL'); // stragglers of the group, if any
}

/** Ends every child still running (SIGTERM, then SIGKILL). */
export async function stopAll(): Promise<void> {
  await Promise.all([...started].map((entry) => stopChild(entry.child)));
}

/** Ends every child at once with SIGKILL (last resort, synchronous). */
export function killAllNow(): void {
  for (const entry of started) signal(entry, 'SIGKILL');
}

/** The next IPC message from a child that satisfies `accept`, or an error on exit or timeout. */
/** What children send over IPC: objects with a `type`. */
export type IpcMessage = { type?: unknown } | null | undefined;

export function nextMessage<T>(child: ChildProcess, accept: (message: IpcMessage) => boolean, timeoutMs: number, what: string): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const onMessage = (message: Serializable) => {
      if (!accept(message as IpcMessage)) return;
      done();
      resolve(message as T);
    };
    const onExit = (code: number | null, sig: string | null) => {
      done();
      reject(new Error(`${what}: the child exited (code ${code}, signal ${sig}) before answering`));
    };
    const timer = setTimeout(() => {
      done();
      reject(new Error(`${what}: no answer within ${Math.round(timeoutMs / 1000)} s`));
    }, timeoutMs);
    const done = () => {
      clearTimeout(timer);
      child.off('message', onMessage);
      child.off('exit', onExit);
    };
    child.on('message', onMessage);
    child.once('exit', onExit);
  });
}
