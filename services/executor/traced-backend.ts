/**
 * A Backend whose operations are spans (`docker exec`, `local read_file`,
 * `ssh create_environment`, ...), children of the executor call that caused
 * them. Wrapped around whatever backend the executor runs, so no backend
 * knows about tracing. Work outside a traced call (the idle reaper, a warm
 * pool) stays untraced.
 */
import { SPAN_ATTRIBUTES as A, type SpanScope, type Tracing } from '../common/tracing/tracing.js';
import type { Backend, BackendEnvironment, ExecResult } from './backend.js';
import { withStageSpans } from '../common/tracing/stage-spans.js';

/** Environment methods that become spans, and their operation names. */
const OPERATIONS: Readonly<Record<string, string>> = {
  exec: 'exec',
  startBackground: 'start_background',
  readFile: 'read_file',
  writeFile: 'write_file',
  stat: 'stat',
  suspend: 'suspend',
  resume: 'resume',
};

export function traceBackend(backend: Backend, tracing: Tracing): Backend {
  const name = backend.capabilities.name;
  const operation = <T>(op: string, fn: (scope: SpanScope) => Promise<T>): Promise<T> =>
    tracing.span(`${name} ${op}`, { kind: 'internal', childOnly: true, attributes: { [A.backend]: name } }, fn);

  const traceEnvironment = (env: BackendEnvironment): BackendEnvironment =>
    // A proxy, not a copy: environments are class instances whose other members (getters, private state) must keep working.
    new Proxy(env, {
      get(target, prop) {
        const value: unknown = Reflect.get(target, prop, target);
        if (typeof value !== 'function') return value;
        const op = typeof prop === 'string' ? OPERATIONS[prop] : undefined;
        const method = value as (...args: unknown[]) => Promise<unknown>;
        if (op === undefined) return method.bind(target);
        return (...args: unknown[]) =>
          operation(op, async (scope) => {
            const result = await method.apply(target, args);
            if (op === 'exec') {
              const r = result as ExecResult;
              scope.setAttributes({ [A.exitCode]: r.exitCode, [A.timedOut]: r.timedOut, [A.interrupted]: r.interrupted });
            }
            return result;
          });
      },
    });

  const diagnose = backend.diagnose?.bind(backend);
  const snapshot = backend.snapshot?.bind(backend);
  const listSnapshots = backend.listSnapshots?.bind(backend);
  const deleteSnapshot = backend.deleteSnapshot?.bind(backend);
  return {
    capabilities: backend.capabilities,
    // Its steps (stage-spans.ts) are spans of their own: a cold start's parts, each timed.
    createEnvironment: (key, options) =>
      operation('create_environment', async () =>
        traceEnvironment(await withStageSpans(tracing, name, () => backend.createEnvironment(key, options))),
      ),
    ...(snapshot ? { snapshot: (key, env, s) => operation('snapshot', () => snapshot(key, env, s)) } : {}),
    ...(listSnapshots ? { listSnapshots } : {}),
    ...(deleteSnapshot ? { deleteSnapshot } : {}),
    ...(diagnose ? { diagnose } : {}),
    close: () => backend.close(),
  };
}
