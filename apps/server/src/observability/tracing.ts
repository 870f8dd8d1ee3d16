/**
 * OpenTelemetry traces, off unless OTEL_EXPORTER_OTLP_ENDPOINT (or
 * OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set; OTEL_SDK_DISABLED=true turns them off again.
 * The official Node SDK reads the standard OTEL_* variables itself (protocol: http/protobuf by
 * default, http/json with OTEL_EXPORTER_OTLP_PROTOCOL=http/json; headers, sampler, service name
 * — `warden` unless OTEL_SERVICE_NAME says otherwise; W3C traceparent and baggage propagation).
 * The sampler is Warden's own unless OTEL_TRACES_SAMPLER is set: DEFAULT_SAMPLER below.
 *
 * Spans: one SERVER span per HTTP request (observability/http.ts, continuing an incoming
 * `traceparent`), `warden.decision` and `warden.audit.commit` inside it, a CLIENT span per
 * upstream HTTP call made with undici — the HTTP proxy, MCP servers, webhook deliveries — which
 * carries `traceparent` to the upstream (@opentelemetry/instrumentation-undici, on undici's
 * diagnostics channels), and `warden.webhook.deliver` around each delivery.
 *
 * Spans show URLs as the audit log does (shared/redact.ts): secret query values redacted in
 * `url.full` and `url.query`; the server span has `url.path` only, and no span has a header
 * but the client span's `user_agent.original`.
 */

import { context, propagation, trace } from '@opentelemetry/api';
import { UndiciInstrumentation, type UndiciRequest } from '@opentelemetry/instrumentation-undici';
import { NodeSDK, type NodeSDKConfiguration } from '@opentelemetry/sdk-node';
import { redactQuery, redactUrl } from '../shared/redact.ts';

/**
 * The sampler unless OTEL_TRACES_SAMPLER names another: a trace that the caller samples (its
 * `traceparent` says so) is recorded whole, and 1 in 10 of the requests that start a trace here
 * (OTEL_TRACES_SAMPLER_ARG sets that ratio): recording every request costs too much
 * throughput (figures: tools/bench/README.md, observability).
 */
export const DEFAULT_SAMPLER = { name: 'parentbased_traceidratio', ratio: '0.1' } as const;

/** Sets DEFAULT_SAMPLER in `env` unless OTEL_TRACES_SAMPLER names one (a ratio given alone applies to it). */
export function useDefaultSampler(env: NodeJS.ProcessEnv): void {
  if (env.OTEL_TRACES_SAMPLER) return;
  env.OTEL_TRACES_SAMPLER = DEFAULT_SAMPLER.name;
  env.OTEL_TRACES_SAMPLER_ARG ||= DEFAULT_SAMPLER.ratio;
}

/**
 * The client span's URL attributes, redacted: the instrumentation takes them over the ones it
 * computed from the request (its startSpanHook). Null when the target is not a URL (it then
 * records none itself).
 */
export function redactedUrlAttributes(request: Pick<UndiciRequest, 'origin' | 'path'>): Record<string, string> | null {
  let url: URL;
  try {
    url = new URL(request.path, request.origin);
  } catch {
    return null;
  }
  return { 'url.full': redactUrl(url.toString()), 'url.query': redactQuery(url.search) };
}

export interface Tracing {
  /** Sends the spans still buffered and stops. */
  shutdown(): Promise<void>;
}

/**
 * Starts the SDK (when Config.tracing says so: config.ts); call before the server starts.
 * `exporter` replaces the one the OTEL_* variables name (tests keep spans in memory).
 */
export function startTracing(env: NodeJS.ProcessEnv = process.env, exporter?: NodeSDKConfiguration['traceExporter']): Tracing {
  // Traces only: metrics are Prometheus's (metrics.ts) and logs are pino's.
  env.OTEL_METRICS_EXPORTER ??= 'none';
  env.OTEL_LOGS_EXPORTER ??= 'none';
  useDefaultSampler(env);
  const undici = new UndiciInstrumentation({ startSpanHook: (request) => redactedUrlAttributes(request) ?? {} });
  const sdk = new NodeSDK({
    serviceName: env.OTEL_SERVICE_NAME || 'warden',
    instrumentations: [undici],
    ...(exporter ? { traceExporter: exporter } : {}),
  });
  sdk.start();
  return {
    shutdown: async () => {
      await sdk.shutdown();
      // the SDK leaves its instrumentation and globals in place: the process's later requests
      // would still get a traceparent of a trace no one records (replacing their own)
      undici.disable();
      trace.disable();
      propagation.disable();
      context.disable();
    },
  };
}
