/**
 * OpenTelemetry traces, off unless OTEL_EXPORTER_OTLP_ENDPOINT (or
 * OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set; OTEL_SDK_DISABLED=true turns them off again.
 * The official Node SDK reads the standard OTEL_* variables itself (protocol: http/protobuf by
 * default, http/json with OTEL_EXPORTER_OTLP_PROTOCOL=http/json; headers, sampler, service name
 * — `warden` unless OTEL_SERVICE_NAME says otherwise; W3C traceparent and baggage propagation).
 *
 * Spans: one SERVER span per HTTP request (observability/http.ts, continuing an incoming
 * `traceparent`), `warden.decision` and `warden.audit.commit` inside it, a CLIENT span per
 * upstream HTTP call made with undici — the HTTP proxy, MCP servers, webhook deliveries — which
 * carries `traceparent` to the upstream (@opentelemetry/instrumentation-undici, on undici's
 * diagnostics channels), and `warden.webhook.deliver` around each delivery.
 */

import { UndiciInstrumentation } from '@opentelemetry/instrumentation-undici';
import { NodeSDK } from '@opentelemetry/sdk-node';

export interface Tracing {
  /** Sends the spans still buffered and stops. */
  shutdown(): Promise<void>;
}

/** Starts the SDK (when Config.tracing says so: config.ts); call before the server starts. */
export function startTracing(env: NodeJS.ProcessEnv = process.env): Tracing {
  // Traces only: metrics are Prometheus's (metrics.ts) and logs are pino's.
  env.OTEL_METRICS_EXPORTER ??= 'none';
  env.OTEL_LOGS_EXPORTER ??= 'none';
  const sdk = new NodeSDK({
    serviceName: env.OTEL_SERVICE_NAME || 'warden',
    instrumentations: [new UndiciInstrumentation()],
  });
  sdk.start();
  return { shutdown: () => sdk.shutdown() };
}
