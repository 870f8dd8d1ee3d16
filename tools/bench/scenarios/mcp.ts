/**
 * The MCP gateway (issues 23, 35 and 47): the same tool call (`echo` on an SDK-built Streamable
 * HTTP upstream) five ways — direct on the upstream, through a bare relay (one more hop, nothing
 * else: what any gateway pays on this machine for being in the path), through Warden's
 * /api/v1/mcp/tools (the agent key as the bearer) in revision 2025-11-25 (`gateway`) and in
 * revision 2026-07-28 (`modern`: the v2 SDK's edge, same governed call), and as POST
 * /runtime/mcp/call. Target (issue 47): CPU per call on the modern path ≤ the 2025 path's.
 *
 *   sequential  SDK clients (and fetch for runtime), one call at a time, the order rotated every
 *               round: what each way adds to direct's latency (targets p50 + ≤ 1.5 ms, p99 + ≤ 5 ms)
 *   concurrent  autocannon, BENCH_CONNECTIONS calls in flight, the ways interleaved over rounds:
 *               calls/s and the CPU per call of the server in front (target gateway ≥ 0.8 × direct)
 *
 * And `mcp-memory` (issue 35, attack 4): what one large upstream answer costs a Warden process.
 */
import { writeFileSync } from 'node:fs';
import { Client as ClientV2, StreamableHTTPClientTransport as TransportV2 } from '@modelcontextprotocol/client';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { positive } from '../config.ts';
import { log, mcpUpstream, relay, type Scenario, type Target, warden } from '../lab.ts';
import { describeRun, type Load, type Measured, runLoad } from '../load.ts';
import { cpuMs, memoryMb, sleep } from '../procs.ts';
import { median, type Percentiles, percentiles, round } from '../report.ts';
import { AGENT_KEY, jsonHeaders, MCP_CALL_BODY } from '../workload.ts';

const WAYS = ['direct', 'relay', 'gateway', 'modern', 'runtime'] as const;
type Way = (typeof WAYS)[number];
const ARGUMENTS = MCP_CALL_BODY(undefined).arguments;
const PROTOCOL = '2025-06-18';
const MCP_ACCEPT = { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': PROTOCOL };
const MODERN = '2026-07-28';
/** A 2026-07-28 request: its revision and method in the headers, the envelope in `_meta`. */
const MODERN_HEADERS = { ...MCP_ACCEPT, 'mcp-protocol-version': MODERN, 'mcp-method': 'tools/call', 'mcp-name': 'echo' };
const MODERN_META = { 'io.modelcontextprotocol/protocolVersion': MODERN, 'io.modelcontextprotocol/clientCapabilities': {} };

/** The v2 SDK's client, negotiating 2026-07-28 (server/discover, no initialize). */
async function modernClient(url: string, headers: Record<string, string>): Promise<ClientV2> {
  const client = new ClientV2({ name: 'warden-bench', version: '1.0.0' }, { versionNegotiation: { mode: 'auto' } });
  await client.connect(new TransportV2(new URL(url), { requestInit: { headers } }));
  if (client.getNegotiatedProtocolVersion() !== MODERN) throw new Error(`${url} did not negotiate ${MODERN}`);
  return client;
}

async function sdkClient(url: string, headers: Record<string, string> = {}): Promise<Client> {
  const client = new Client({ name: 'warden-bench', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } }));
  return client;
}

/** A session on a stateful MCP server, opened by hand: its id, for raw tools/call POSTs. */
async function openSession(url: string): Promise<string> {
  const post = (body: unknown, headers: Record<string, string> = {}) =>
    fetch(url, { method: 'POST', headers: { ...MCP_ACCEPT, ...headers }, body: JSON.stringify(body) });
  const res = await post({
    jsonrpc: '2.0',
    id: 0,
    method: 'initialize',
    params: { protocolVersion: PROTOCOL, capabilities: {}, clientInfo: { name: 'warden-bench', version: '1.0.0' } },
  });
  await res.text();
  const session = res.headers.get('mcp-session-id');
  if (!session) throw new Error(`${url} opened no session (${res.status})`);
  await (await post({ jsonrpc: '2.0', method: 'notifications/initialized' }, { 'mcp-session-id': session })).text();
  return session;
}

export const mcpScenario: Scenario = {
  name: 'mcp',
  about: 'one MCP tool call direct, through a bare relay, through the gateway and as /runtime/mcp/call',
  inFullRun: true,
  async run(config) {
    const calls = positive('BENCH_MCP_CALLS', 500);
    const warmup = positive('BENCH_MCP_WARMUP', 100);
    const rounds = process.env.BENCH_MCP_ROUNDS === '0' ? 0 : positive('BENCH_MCP_ROUNDS', config.rounds);
    const upstream = await mcpUpstream();
    const s = await warden(config, { label: 'mcp', seedWith: upstream.url });
    const hop = await relay(upstream.url);
    const urls: Record<Way, string> = {
      direct: upstream.url,
      relay: hop.url,
      gateway: `${s.baseUrl}/mcp/tools`,
      modern: `${s.baseUrl}/mcp/tools`,
      runtime: `${s.baseUrl}/runtime/mcp/call`,
    };

    // ---- sequential
    const gatewayHeaders = { authorization: `Bearer ${AGENT_KEY}` };
    const clients = {
      direct: await sdkClient(urls.direct),
      relay: await sdkClient(urls.relay),
      gateway: await sdkClient(urls.gateway, gatewayHeaders),
    };
    const modern = await modernClient(urls.modern, gatewayHeaders);
    const viaSdk = (client: Client) => async () => {
      const result = await client.callTool({ name: 'echo', arguments: ARGUMENTS });
      if (result.isError) throw new Error(`tool error ${JSON.stringify(result.content).slice(0, 300)}`);
    };
    const call: Record<Way, () => Promise<void>> = {
      direct: viaSdk(clients.direct),
      relay: viaSdk(clients.relay),
      gateway: viaSdk(clients.gateway),
      modern: async () => {
        const result = await modern.callTool({ name: 'echo', arguments: ARGUMENTS });
        if (result.isError) throw new Error(`tool error ${JSON.stringify(result.content).slice(0, 300)}`);
      },
      runtime: async () => {
        const body = JSON.stringify(MCP_CALL_BODY(undefined));
        const res = await fetch(urls.runtime, { method: 'POST', headers: jsonHeaders(s.key), body });
        const text = await res.text();
        if (res.status !== 200 || !text.includes('"allowed":true'))
          throw new Error(`runtime answered ${res.status}: ${text.slice(0, 300)}`);
      },
    };
    log(`MCP sequential: ${warmup} warm-up + ${calls} rounds of each way, order rotated…`);
    const took: Record<Way, number[]> = { direct: [], relay: [], gateway: [], modern: [], runtime: [] };
    const added: Record<Way, number[]> = { direct: [], relay: [], gateway: [], modern: [], runtime: [] };
    for (let round = 0; round < warmup + calls; round++) {
      const times = {} as Record<Way, number>;
      // the order rotates, so that no way always comes first (or after a pause)
      for (let i = 0; i < WAYS.length; i++) {
        const way = WAYS[(round + i) % WAYS.length] as Way;
        const started = performance.now();
        await call[way]();
        times[way] = performance.now() - started;
      }
      if (round < warmup) continue;
      for (const way of WAYS) {
        took[way].push(times[way]);
        added[way].push(times[way] - times.direct);
      }
    }
    await Promise.allSettled([...Object.values(clients).map((client) => client.close()), modern.close()]);
    const sequential = Object.fromEntries(
      WAYS.map((way) => [way, { ...percentiles(took[way]), pairedAdded: percentiles(added[way]) }]),
    ) as Record<Way, Percentiles & { pairedAdded: Percentiles }>;
    const plus = (way: Way, p: 'p50' | 'p99') => round(sequential[way][p] - sequential.direct[p]) as number;

    // ---- concurrent: raw JSON-RPC POSTs, each with an id of its own (one session per stateful way)
    const toolCall = JSON.stringify({ jsonrpc: '2.0', id: '[<id>]', method: 'tools/call', params: { name: 'echo', arguments: ARGUMENTS } });
    const servers: Record<Way, Target> = {
      direct: { pids: [upstream.pid], origin: upstream.url },
      relay: { pids: [hop.pid], origin: hop.url },
      gateway: s,
      modern: s,
      runtime: s,
    };
    const loads: Record<Way, Load> = {
      direct: {
        target: 'direct',
        scenario: 'mcp',
        server: servers.direct,
        url: urls.direct,
        method: 'POST',
        headers: { ...MCP_ACCEPT, 'mcp-session-id': await openSession(urls.direct) },
        body: toolCall,
        idReplacement: true,
      },
      relay: {
        target: 'relay',
        scenario: 'mcp',
        server: servers.relay,
        url: urls.relay,
        method: 'POST',
        headers: { ...MCP_ACCEPT, 'mcp-session-id': await openSession(urls.relay) },
        body: toolCall,
        idReplacement: true,
      },
      gateway: {
        target: 'gateway',
        scenario: 'mcp',
        server: s,
        url: urls.gateway,
        method: 'POST',
        headers: { ...MCP_ACCEPT, ...gatewayHeaders },
        body: toolCall,
        idReplacement: true,
        audit: { table: 'audit_events', perOk: 2 },
      },
      modern: {
        target: 'modern',
        scenario: 'mcp',
        server: s,
        url: urls.modern,
        method: 'POST',
        headers: { ...MODERN_HEADERS, ...gatewayHeaders },
        body: JSON.stringify({
          jsonrpc: '2.0',
          id: '[<id>]',
          method: 'tools/call',
          params: { name: 'echo', arguments: ARGUMENTS, _meta: MODERN_META },
        }),
        idReplacement: true,
        audit: { table: 'audit_events', perOk: 2 },
      },
      runtime: {
        target: 'runtime',
        scenario: 'mcp',
        server: s,
        url: urls.runtime,
        method: 'POST',
        headers: jsonHeaders(s.key),
        body: JSON.stringify(MCP_CALL_BODY(undefined)),
        audit: { table: 'audit_events', perOk: 2 },
      },
    };
    const concurrent: Array<Measured & { way: Way }> = [];
    for (let round = 1; round <= rounds; round++) {
      for (let i = 0; i < WAYS.length; i++) {
        const way = WAYS[(round - 1 + i) % WAYS.length] as Way;
        log(`MCP ${way} at ${config.connections} concurrent (round ${round})…`);
        const measured = await runLoad(loads[way], {
          mode: 'closed',
          connections: config.connections,
          warmupSeconds: config.warmupSeconds,
          seconds: config.seconds,
          round,
        });
        log(describeRun(measured));
        concurrent.push({ ...measured, way });
      }
    }
    const rps = (way: Way) => median(concurrent.filter((r) => r.way === way).map((r) => r.load.rps));
    const cpu = (way: Way) => round(median(concurrent.filter((r) => r.way === way).map((r) => r.cpuMsPerRequest)));
    const headline = {
      gateway_cpu_ms_per_call: cpu('gateway'),
      modern_cpu_ms_per_call: cpu('modern'),
      runtime_cpu_ms_per_call: cpu('runtime'),
      relay_cpu_ms_per_call: cpu('relay'),
      gateway_added_p50_ms: plus('gateway', 'p50'),
      gateway_added_p99_ms: plus('gateway', 'p99'),
      modern_added_p50_ms: plus('modern', 'p50'),
      relay_added_p50_ms: plus('relay', 'p50'),
      relay_added_p99_ms: plus('relay', 'p99'),
      runtime_added_p50_ms: plus('runtime', 'p50'),
      gateway_over_direct_rps: round(rps('gateway') / rps('direct')),
      relay_over_direct_rps: round(rps('relay') / rps('direct')),
      runtime_over_direct_rps: round(rps('runtime') / rps('direct')),
    };
    const h = headline;
    const clean = concurrent.every((r) => r.load.errors + r.load.non2xx === 0 && r.audit?.ok !== false);
    return {
      report: [
        'MCP tool call (echo): direct, through a bare relay, through the gateway (/api/v1/mcp/tools), as /runtime/mcp/call',
        `  CPU ms per call of the server in front (median, ${config.connections} concurrent): gateway ${h.gateway_cpu_ms_per_call} (2025-11-25), modern ${h.modern_cpu_ms_per_call} (2026-07-28), runtime ${h.runtime_cpu_ms_per_call}, relay ${h.relay_cpu_ms_per_call}, upstream (direct) ${cpu('direct')}`,
        `  sequential (${calls} rounds after ${warmup}), p50/p99 ms: ${WAYS.map((w) => `${w} ${sequential[w].p50}/${sequential[w].p99}`).join(', ')}`,
        `  added to direct: gateway +${h.gateway_added_p50_ms}/+${h.gateway_added_p99_ms} ms (targets +1.5/+5; paired p50 +${sequential.gateway.pairedAdded.p50}), relay +${h.relay_added_p50_ms}/+${h.relay_added_p99_ms}, runtime +${h.runtime_added_p50_ms}`,
        ...concurrent.map(
          (r) =>
            `  round ${r.round} ${r.way.padEnd(8)} ${r.load.rps.toFixed(0).padStart(6)} calls/s, p50 ${r.load.latencyMs.p50} ms, p99 ${r.load.latencyMs.p99} ms, CPU ${r.cpuMsPerRequest.toFixed(3)} ms/call${r.audit ? `, audit ${r.audit.written}/${r.audit.expected}` : ''}`,
        ),
        `  calls/s over direct: gateway ${h.gateway_over_direct_rps}, relay ${h.relay_over_direct_rps}, runtime ${h.runtime_over_direct_rps} (target gateway ≥ 0.8)`,
      ],
      targets: {
        'MCP gateway added p50 <= 1.5 ms (sequential)': h.gateway_added_p50_ms <= 1.5,
        'MCP gateway added p99 <= 5 ms (sequential)': h.gateway_added_p99_ms <= 5,
        ...(rounds > 0 && {
          [`MCP gateway throughput >= 0.8 x direct (${config.connections} concurrent)`]: (h.gateway_over_direct_rps ?? 0) >= 0.8,
        }),
        'MCP calls: no errors, 2 audit events per governed call': clean,
        ...(rounds > 0 && {
          'MCP 2026-07-28 CPU per call <= 2025-11-25 (same run)': (h.modern_cpu_ms_per_call ?? 0) <= (h.gateway_cpu_ms_per_call ?? 0),
        }),
      },
      figures: {
        headline,
        sequential,
        concurrent,
        settings: { calls, warmup, rounds },
      },
    };
  },
};

export const mcpMemoryScenario: Scenario = {
  name: 'mcp-memory',
  about: "one large upstream MCP answer: the Warden process's memory, and another agent's calls meanwhile",
  inFullRun: false,
  async run(config) {
    const sizes = (process.env.BENCH_MCP_MEMORY_SIZES ?? '30,80').split(',').map(Number);
    // two upstreams in processes of their own: building a large answer stalls neither the other's calls nor this process
    const [big, small] = [await mcpUpstream('bounds'), await mcpUpstream('bounds')];
    const s = await warden(config, { label: 'mcp-memory', workers: 1 });
    const pid = s.pids[0] as number;
    const rows: string[] = [];
    const figures: Array<Record<string, number | string>> = [];
    for (const mode of ['sse', 'json']) {
      await s.call('POST', '/mcp-servers', { name: `big ${mode}`, slug: `big-${mode}`, transport_url: `${big.url}/${mode}` });
      await s.call('POST', '/mcp-servers', { name: `small ${mode}`, slug: `small-${mode}`, transport_url: `${small.url}/${mode}` });
      const agent = async (name: string, server: string) => {
        const key = `ak_${name}_${'1'.repeat(24)}`;
        await s.call('POST', '/agents', { name, slug: name, provider: 'local', api_key: key });
        return sdkClient(`${s.baseUrl}/mcp/${server}`, { authorization: `Bearer ${key}` });
      };
      const [caller, other] = [await agent(`big-${mode}`, `big-${mode}`), await agent(`other-${mode}`, `small-${mode}`)];
      const small10 = () => other.callTool({ name: 'big', arguments: { bytes: 10 } });
      for (const mb of sizes) {
        await caller.callTool({ name: 'big', arguments: { bytes: 10 } });
        await small10();
        await sleep(1_000);
        const before = memoryMb(pid).rss;
        writeFileSync(`/proc/${pid}/clear_refs`, '5'); // resets VmHWM
        let [running, slowest] = [true, 0];
        const probing = (async () => {
          while (running) {
            const started = performance.now();
            await small10();
            slowest = Math.max(slowest, performance.now() - started);
            await sleep(20);
          }
        })();
        const [cpu0, started] = [cpuMs(pid), performance.now()];
        const result = await caller.callTool({ name: 'big', arguments: { bytes: mb * 2 ** 20 } }, undefined, { timeout: 120_000 });
        const [took, cpu] = [performance.now() - started, cpuMs(pid) - cpu0];
        running = false;
        await probing;
        const peak = memoryMb(pid).hwm;
        await sleep(1_000);
        const after = memoryMb(pid).rss;
        const answer = result.isError ? `tool error: ${JSON.stringify(result.content).slice(0, 160)}` : `${mb} MB answered`;
        figures.push({ mode, mb, before, peak, after, callMs: took, cpuMs: cpu, otherSlowestMs: slowest, answer });
        rows.push(
          `  ${mode.padEnd(4)} ${String(mb).padStart(3)} MB: RSS ${before.toFixed(0)} MB before, peak +${(peak - before).toFixed(0)}, after +${(after - before).toFixed(0)}; call ${took.toFixed(0)} ms (${answer}), CPU ${cpu.toFixed(0)} ms; the other agent's slowest call ${slowest.toFixed(0)} ms`,
        );
      }
      await Promise.allSettled([caller.close(), other.close()]);
    }
    return {
      report: ['One large upstream answer through the gateway (one server process):', ...rows],
      targets: {},
      figures: { sizes: figures },
    };
  },
};
