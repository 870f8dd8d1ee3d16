/**
 * Summarises a V8 .cpuprofile (from node --cpu-prof): self time per function (callFrame
 * functionName + url + line) and per package/file, optionally only over a time window (the
 * load phase; V8's profile clock and process.hrtime are both CLOCK_MONOTONIC on Linux).
 *
 * Standalone: `npx tsx tools/bench/profile.ts <file.cpuprofile> [top]`.
 */
import { readFileSync } from 'node:fs';

interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
  columnNumber: number;
}

interface ProfileNode {
  id: number;
  callFrame: CallFrame;
  children?: number[];
}

interface CpuProfile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

export interface ProfileEntry {
  name: string;
  where: string;
  selfMs: number;
  percent: number;
  /** For native and node-core functions: the packages/files whose code called them, by time. */
  via?: string[];
}

export interface ProfileSummary {
  file: string;
  windowed: boolean;
  sampledMs: number;
  /** Share of samples that were the idle node (the process waiting for I/O). */
  idlePercent: number;
  top: ProfileEntry[];
  /** Self time by package or source file, as sampled (natives without a script are their own bucket). */
  byModule: ProfileEntry[];
  /** Self time charged to the package or source file that caused it: native and node-core frames count for their nearest caller outside node core. */
  byCaller: ProfileEntry[];
  /**
   * Total (inclusive) time by package or source file: a sample counts for every package on its
   * stack, once. Stacks end at an await, so this is the synchronous work under each package.
   */
  inclusive: ProfileEntry[];
}

const ROOT_MARK = '/work/main/';

/** Shortens a script URL: node:internal stays, node_modules/<pkg>/…, apps/…, else the path. */
export function shortUrl(url: string): string {
  if (!url) return '';
  let path = url.replace(/^file:\/\//, '');
  const nm = path.lastIndexOf('/node_modules/');
  if (nm >= 0) return path.slice(nm + '/node_modules/'.length);
  const root = process.cwd().endsWith('/') ? process.cwd() : `${process.cwd()}/`;
  if (path.startsWith(root)) path = path.slice(root.length);
  else if (path.startsWith(ROOT_MARK)) path = path.slice(ROOT_MARK.length);
  return path;
}

/** The module a URL belongs to: the package (node_modules/<pkg> or @scope/pkg), the source file, or node internals. */
export function moduleOf(url: string): string {
  if (!url) return '(native / VM)';
  if (url.startsWith('node:')) return 'node: (core)';
  const short = shortUrl(url);
  if (url.includes('/node_modules/')) {
    const parts = short.split('/');
    return parts[0]?.startsWith('@') ? `${parts[0]}/${parts[1]}` : (parts[0] ?? short);
  }
  return short;
}

export function summariseProfile(file: string, window?: { startUs: number; endUs: number }, top = 15): ProfileSummary {
  const profile = JSON.parse(readFileSync(file, 'utf8')) as CpuProfile;
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const parentOf = new Map<number, number>();
  for (const node of profile.nodes) for (const child of node.children ?? []) parentOf.set(child, node.id);
  const special = (name: string) => name === '(garbage collector)' || name === '(program)' || name === '(idle)' || name === '(root)';
  /** The package or file of the nearest frame (this one or an ancestor) that is neither native nor node core. */
  const callerModule = (id: number): string => {
    const own = (byId.get(id) as ProfileNode).callFrame;
    if (special(own.functionName)) return own.functionName;
    for (let at: number | undefined = id; at !== undefined; at = parentOf.get(at)) {
      const url = (byId.get(at) as ProfileNode).callFrame.url;
      if (url && !url.startsWith('node:')) return moduleOf(url);
    }
    return 'node: (core, no package caller)';
  };
  const selfUs = new Map<number, number>();
  // DevTools' attribution: sample i lasts until sample i+1.
  let t = profile.startTime;
  const stamps: number[] = [];
  for (const delta of profile.timeDeltas) {
    t += delta;
    stamps.push(t);
  }
  const usable =
    window && window.startUs >= profile.startTime - 1e6 && window.endUs <= profile.endTime + 1e6 && window.endUs > window.startUs;
  let total = 0;
  for (let i = 0; i < profile.samples.length; i++) {
    const start = stamps[i] as number;
    const end = i + 1 < stamps.length ? (stamps[i + 1] as number) : profile.endTime;
    if (usable && (start < window.startUs || start > window.endUs)) continue;
    const id = profile.samples[i] as number;
    const duration = Math.max(0, end - start);
    selfUs.set(id, (selfUs.get(id) ?? 0) + duration);
    total += duration;
  }
  const stackModules = new Map<number, string[]>();
  const modulesOnStack = (id: number): string[] => {
    const known = stackModules.get(id);
    if (known) return known;
    const url = (byId.get(id) as ProfileNode).callFrame.url;
    const parent = parentOf.get(id);
    const above = parent === undefined ? [] : modulesOnStack(parent);
    const own = url && !url.startsWith('node:') ? moduleOf(url) : undefined;
    const list = own && !above.includes(own) ? [...above, own] : above;
    stackModules.set(id, list);
    return list;
  };
  const perInclusive = new Map<string, number>();
  const perFunction = new Map<string, { name: string; where: string; us: number; native: boolean; via: Map<string, number> }>();
  const perModule = new Map<string, number>();
  const perCaller = new Map<string, number>();
  let idle = 0;
  for (const [id, us] of selfUs) {
    const frame = (byId.get(id) as ProfileNode).callFrame;
    const name = frame.functionName || '(anonymous)';
    if (name === '(idle)') idle += us;
    const where = frame.url ? `${shortUrl(frame.url)}:${frame.lineNumber + 1}:${frame.columnNumber + 1}` : '';
    const key = `${name}|${frame.url}|${frame.lineNumber}|${frame.columnNumber}`;
    const native = !special(name) && (!frame.url || frame.url.startsWith('node:'));
    const entry = perFunction.get(key) ?? { name, where, us: 0, native, via: new Map<string, number>() };
    entry.us += us;
    const caller = callerModule(id);
    if (native) entry.via.set(caller, (entry.via.get(caller) ?? 0) + us);
    perFunction.set(key, entry);
    const module = frame.url ? moduleOf(frame.url) : special(name) ? name : '(native, no script)';
    perModule.set(module, (perModule.get(module) ?? 0) + us);
    perCaller.set(caller, (perCaller.get(caller) ?? 0) + us);
    if (name !== '(idle)') for (const module of modulesOnStack(id)) perInclusive.set(module, (perInclusive.get(module) ?? 0) + us);
  }
  const busy = total - idle;
  const ranked = (map: Map<string, number>) =>
    [...map.entries()]
      .filter(([name]) => name !== '(idle)')
      .sort((a, b) => b[1] - a[1])
      .slice(0, top)
      .map(([name, us]) => asEntry(name, '', us));
  const asEntry = (name: string, where: string, us: number): ProfileEntry => ({
    name,
    where,
    selfMs: Number((us / 1000).toFixed(1)),
    percent: Number(((100 * us) / (busy || 1)).toFixed(1)),
  });
  return {
    file,
    windowed: Boolean(usable),
    sampledMs: Number((total / 1000).toFixed(1)),
    idlePercent: Number(((100 * idle) / (total || 1)).toFixed(1)),
    top: [...perFunction.values()]
      .filter((e) => e.name !== '(idle)')
      .sort((a, b) => b.us - a.us)
      .slice(0, top)
      .map((e) => ({
        ...asEntry(e.name, e.where, e.us),
        ...(e.native
          ? {
              via: [...e.via.entries()]
                .sort((a, b) => b[1] - a[1])
                .slice(0, 3)
                .map(([module, us]) => `${module} ${(us / 1000).toFixed(0)} ms`),
            }
          : {}),
      })),
    byModule: ranked(perModule),
    byCaller: ranked(perCaller),
    inclusive: ranked(perInclusive),
  };
}

export function formatProfile(summary: ProfileSummary): string {
  const lines = [
    `CPU profile ${summary.file}`,
    `  ${summary.windowed ? 'load window only' : 'whole process life'}: ${summary.sampledMs} ms sampled, ${summary.idlePercent}% idle; percentages are of the non-idle time`,
    '',
    '  Top self time, by function:',
    ...summary.top.map(
      (e, i) =>
        `  ${String(i + 1).padStart(2)}. ${e.percent.toFixed(1).padStart(5)}%  ${e.selfMs.toFixed(1).padStart(8)} ms  ${e.name}  ${e.where}${e.via?.length ? `  (called from: ${e.via.join(', ')})` : ''}`,
    ),
    '',
    '  Self time by package / file, as sampled:',
    ...summary.byModule.map((e) => `      ${e.percent.toFixed(1).padStart(5)}%  ${e.selfMs.toFixed(1).padStart(8)} ms  ${e.name}`),
    '',
    '  Self time charged to the calling package / file (native and node-core time counted for its nearest caller):',
    ...summary.byCaller.map((e) => `      ${e.percent.toFixed(1).padStart(5)}%  ${e.selfMs.toFixed(1).padStart(8)} ms  ${e.name}`),
    '',
    '  Total (inclusive) time by package / file on the stack (synchronous work under it; stacks end at each await):',
    ...summary.inclusive.map((e) => `      ${e.percent.toFixed(1).padStart(5)}%  ${e.selfMs.toFixed(1).padStart(8)} ms  ${e.name}`),
  ];
  return lines.join('\n');
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const file = process.argv[2];
  if (!file) {
    process.stderr.write('usage: tsx tools/bench/profile.ts <file.cpuprofile> [top]\n');
    process.exit(2);
  }
  process.stdout.write(`${formatProfile(summariseProfile(file, undefined, Number(process.argv[3] ?? 15)))}\n`);
}
