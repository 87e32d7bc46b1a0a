/** Starts tracing, loading OpenTelemetry only when tracing is on. */
import type { TracingConfig } from '../config.js';
import type { Logger } from '../logging.js';
import type { Tracing, TracingRole } from './tracing.js';

/**
 * Starts tracing as `config` says: undefined when it is off (no OpenTelemetry
 * module is loaded then), otherwise a tracer exporting OTLP/protobuf.
 */
export async function startTracing(config: TracingConfig, role: TracingRole, logger: Logger): Promise<Tracing | undefined> {
  if (config.exporter === 'none') return undefined;
  const { createOtelTracing } = await import('./otel-tracing.js');
  return createOtelTracing(config, role, logger);
}
