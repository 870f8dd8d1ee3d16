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
 */

import { UndiciInstrumentation } from '@opentelemetry/instrumentation-undici';
import { NodeSDK } from '@opentelemetry/sdk-node';

/**
 * The sampler unless OTEL_TRACES_SAMPLER names another: a trace that the caller samples (its
 * `traceparent` says so) is recorded whole, and 1 in 10 of the requests that start a trace here
 * (OTEL_TRACES_SAMPLER_ARG sets that ratio). Recording every request cost a sixth of the
 * throughput on Node 24; with this sampler, four runs measured 0.81–0.98 × of untraced
 * (tools/bench/README.md, observability).
 */
export const DEFAULT_SAMPLER = { name: 'parentbased_traceidratio', ratio: '0.1' } as const;

/** Sets DEFAULT_SAMPLER in `env` unless OTEL_TRACES_SAMPLER names one (a ratio given alone applies to it). */
export function useDefaultSampler(env: NodeJS.ProcessEnv): void {
  if (env.OTEL_TRACES_SAMPLER) return;
  env.OTEL_TRACES_SAMPLER = DEFAULT_SAMPLER.name;
  env.OTEL_TRACES_SAMPLER_ARG ||= DEFAULT_SAMPLER.ratio;
}

export interface Tracing {
  /** Sends the spans still buffered and stops. */
  shutdown(): Promise<void>;
}

/** Starts the SDK (when Config.tracing says so: config.ts); call before the server starts. */
export function startTracing(env: NodeJS.ProcessEnv = process.env): Tracing {
  // Traces only: metrics are Prometheus's (metrics.ts) and logs are pino's.
  env.OTEL_METRICS_EXPORTER ??= 'none';
  env.OTEL_LOGS_EXPORTER ??= 'none';
  useDefaultSampler(env);
  const sdk = new NodeSDK({
    serviceName: env.OTEL_SERVICE_NAME || 'warden',
    instrumentations: [new UndiciInstrumentation()],
  });
  sdk.start();
  return { shutdown: () => sdk.shutdown() };
}
