/**
 * The benchmark's child processes and what /proc says about processes: CPU time, memory, the
 * machine's busy time, process trees. Every child started here is registered and ended by its
 * own pid (or the process group it leads), never by name.
 */
import { type ChildProcess, execFileSync, fork, type SpawnOptions, spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';

export const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const HERE = fileURLToPath(new URL('./', import.meta.url));
const CLK_TCK = Number(execFileSync('getconf', ['CLK_TCK']).toString().trim()) || 100;

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

const statFields = (pid: number) => {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // after "pid (comm) " field 3 (state) is index 0: ppid is 1, utime 11, stime 12
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
};

/** CPU time of a process so far in ms, user and system; zero once it is gone. */
export function cpuTimes(pid: number): { user: number; system: number } {
  try {
    const fields = statFields(pid);
    return { user: (Number(fields[11]) * 1000) / CLK_TCK, system: (Number(fields[12]) * 1000) / CLK_TCK };
  } catch {
    return { user: 0, system: 0 };
  }
}

export const cpuMs = (pid: number) => {
  const { user, system } = cpuTimes(pid);
  return user + system;
};

/** VmRSS and VmHWM (peak since start, or since clear_refs 5) of a process, in MB; 0 once it is gone. */
export function memoryMb(pid: number): { rss: number; hwm: number } {
  let status = '';
  try {
    status = readFileSync(`/proc/${pid}/status`, 'utf8');
  } catch {
    return { rss: 0, hwm: 0 };
  }
  const kb = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? 0);
  return { rss: kb('VmRSS') / 1024, hwm: kb('VmHWM') / 1024 };
}

/** Busy and total jiffies of the whole machine (the first line of /proc/stat; idle and iowait are not busy). */
export function machineTicks(): { busy: number; total: number } {
  const values = (readFileSync('/proc/stat', 'utf8').split('\n')[0] ?? '').trim().split(/\s+/).slice(1).map(Number);
  const total = values.reduce((a, b) => a + b, 0);
  return { busy: total - (values[3] ?? 0) - (values[4] ?? 0), total };
}

/** Every descendant of a process, with its depth below it and its command line. */
export function descendants(root: number): Array<{ pid: number; depth: number; cmdline: string }> {
  const children = new Map<number, number[]>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const parent = Number(statFields(Number(entry))[1]);
      children.set(parent, [...(children.get(parent) ?? []), Number(entry)]);
    } catch {
      // gone meanwhile
    }
  }
  const found: Array<{ pid: number; depth: number; cmdline: string }> = [];
  const walk = (pid: number, depth: number) => {
    for (const child of children.get(pid) ?? []) {
      try {
        found.push({ pid: child, depth, cmdline: readFileSync(`/proc/${child}/cmdline`, 'utf8').replaceAll('\0', ' ').trim() });
        walk(child, depth + 1);
      } catch {
        // gone meanwhile
      }
    }
  };
  walk(root, 1);
  return found;
}

export async function freePort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const { port } = probe.address() as { port: number };
  await new Promise<void>((resolve) => probe.close(() => resolve()));
  return port;
}

// ---------------------------------------------------------------- children

interface Tracked {
  child: ChildProcess;
  /** Leads its own process group (spawned detached): ended as a group. */
  group: boolean;
}

const running = new Set<Tracked>();
const known = new WeakMap<ChildProcess, Tracked>();
let stopping = false;

/** From now on no child may be started (the run is being stopped). */
export function refuseNewChildren(): void {
  stopping = true;
}

function track(child: ChildProcess, name: string, group: boolean): ChildProcess {
  const entry = { child, group };
  running.add(entry);
  known.set(child, entry);
  child.once('exit', () => running.delete(entry));
  // children never write to our stdout: its last line is the JSON result
  const relay = (chunk: Buffer) =>
    process.stderr.write(
      chunk
        .toString('utf8')
        .split('\n')
        .filter(Boolean)
        .map((line) => `[${name}] ${line}\n`)
        .join(''),
    );
  child.stdout?.on('data', relay);
  child.stderr?.on('data', relay);
  return child;
}

const refuseIfStopping = (name: string) => {
  if (stopping) throw new Error(`not starting ${name}: the benchmark is stopping`);
};

/** Forks one of the benchmark's own files (tools/bench/<file>) under tsx, with IPC. */
export function forkBench(file: string, name: string, args: string[] = [], env: NodeJS.ProcessEnv = {}): ChildProcess {
  refuseIfStopping(name);
  const child = fork(`${HERE}${file}`, args, {
    cwd: ROOT,
    execArgv: ['--import', 'tsx'],
    stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
    env: { ...process.env, NODE_OPTIONS: '', ...env },
  });
  return track(child, name, false);
}

/** Spawns a command as the leader of a new process group, so that its whole tree can be ended. */
export function spawnGroup(command: string, args: string[], name: string, options: SpawnOptions): ChildProcess {
  refuseIfStopping(name);
  return track(spawn(command, args, { ...options, detached: true }), name, true);
}

function signal(entry: Tracked, sig: NodeJS.Signals): void {
  try {
    if (entry.group && entry.child.pid) process.kill(-entry.child.pid, sig);
    else entry.child.kill(sig);
  } catch {
    // already gone
  }
}

/** Ends one child: `first` (SIGTERM by default), then SIGKILL after `graceMs`. */
export async function stopChild(child: ChildProcess, first: NodeJS.Signals = 'SIGTERM', graceMs = 5_000): Promise<void> {
  const entry = known.get(child) ?? { child, group: false };
  if (child.exitCode === null && child.signalCode === null) {
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    signal(entry, first);
    const timer = setTimeout(() => signal(entry, 'SIGKILL'), graceMs);
    await exited;
    clearTimeout(timer);
  }
  if (entry.group) signal(entry, 'SIGKILL'); // what is left of its group, if anything
}

export const stopAll = () => Promise.all([...running].map((entry) => stopChild(entry.child)));

/** Ends every child at once (last resort, synchronous). */
export function killAllNow(): void {
  for (const entry of running) signal(entry, 'SIGKILL');
}

/** The next IPC message from a child of the given type; an `error` message, an exit or the timeout rejects. */
export function nextMessage<T>(child: ChildProcess, type: string, timeoutMs: number, what: string): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const onMessage = (message: { type?: string; error?: string }) => {
      if (message?.type === 'error') finish(() => reject(new Error(`${what}: ${message.error}`)));
      else if (message?.type === type) finish(() => resolve(message as T));
    };
    const onExit = (code: number | null, sig: string | null) =>
      finish(() => reject(new Error(`${what}: the child exited (code ${code}, signal ${sig}) before answering`)));
    const timer = setTimeout(() => finish(() => reject(new Error(`${what}: no answer within ${timeoutMs / 1000} s`))), timeoutMs);
    const finish = (settle: () => void) => {
      clearTimeout(timer);
      child.off('message', onMessage);
      child.off('exit', onExit);
      settle();
    };
    child.on('message', onMessage);
    child.once('exit', onExit);
  });
}

/** In a forked child: the next message of this type from the parent. */
export function fromParent<T>(type: string): Promise<T> {
  return new Promise((resolve) => {
    const onMessage = (message: { type?: string }) => {
      if (message?.type !== type) return;
      process.off('message', onMessage);
      resolve(message as T);
    };
    process.on('message', onMessage);
  });
}
