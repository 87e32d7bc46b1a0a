/**
 * `berth_rpc_calls_total{service,method,code}`: every gRPC call a server
 * answered, by its status. The middleware goes outside the error boundary,
 * so it sees the status the client gets.
 */
import { ServerError, Status, type ServerMiddleware } from 'nice-grpc';
import { counter, Series, type Registry } from './metrics.js';

export function rpcMetrics(registry: Registry): ServerMiddleware {
  const calls = counter(registry, {
    name: 'berth_rpc_calls_total',
    help: 'gRPC calls answered, by service, method and status code',
    labelNames: ['service', 'method', 'code'],
  });
  // Paths are the served methods' own ('/berth.v1.Dispatcher/CallTool'): unknown ones never get here.
  const series = new Series((path: string, code: Status) => {
    const slash = path.lastIndexOf('/');
    return calls.labels({ service: path.slice(1, slash), method: path.slice(slash + 1), code: Status[code] ?? String(code) });
  });
  return async function* rpcMetricsMiddleware(call, context) {
    let code = Status.OK;
    try {
      return yield* call.next(call.request, context);
    } catch (err) {
      code = err instanceof ServerError ? err.code : Status.UNKNOWN;
      throw err;
    } finally {
      // A stream the client cancelled ends here without an error.
      if (code === Status.OK && context.signal.aborted) code = Status.CANCELLED;
      series.get(call.method.path, code).inc();
    }
  };
}
