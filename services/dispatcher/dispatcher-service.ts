/**
 * gRPC adapter for the Dispatcher service: converts messages and wires the
 * Session stream; the work happens in {@link Dispatcher}.
 */
import { Status, type CallContext } from 'nice-grpc';
import { AsyncQueue } from '../common/async-queue.js';
import { InvalidArgumentError, UnavailableError } from '../common/errors.js';
import type { Logger } from '../common/logging.js';
import type {
  DispatcherServiceImplementation,
  SessionClientMessage,
  SessionServerMessage,
} from '../gen/berth/v1/dispatcher.js';
import { INTERACTIVE_HEADER, isInteractive } from './approval/flow/approval-service.js';
import type { ApprovalSurface } from './approval/approval-types.js';
import { StreamApprovals } from './approval/flow/stream-approvals.js';
import type { Dispatcher } from './dispatcher.js';
import { SessionEvents } from './session-events.js';
import { toServerError } from '../common/grpc-errors.js';
import { linkSignals } from '../common/linked-signal.js';
import type { TenantContext } from './tenants.js';

/** Most tool calls one Session may run at once; more are refused with an error result. */
const MAX_SESSION_CONCURRENCY = 64;

export function createDispatcherService(
  dispatcher: Dispatcher,
  logger: Logger,
  shutdownSignal: AbortSignal,
  /** Aborted when a drain begins: event streams end at once (clients resume elsewhere with the last id). */
  drainSignal: AbortSignal = shutdownSignal,
): DispatcherServiceImplementation<TenantContext> {
  const callSignal = (context: CallContext) => AbortSignal.any([context.signal, shutdownSignal]);
  const interactive = (context: CallContext) => {
    const value = context.metadata.get(INTERACTIVE_HEADER);
    return isInteractive(typeof value === 'string' ? value : undefined);
  };

  return {
    async listTools(request, context) {
      const { tools, unknownToolsets } = await dispatcher.listTools(
        context.tenant,
        request.enabledToolsets,
        request.disabledToolsets,
      );
      const availabilityJson = request.explain ? JSON.stringify(await dispatcher.availabilityReport(context.tenant)) : '';
      return { toolsJson: JSON.stringify(tools), unknownToolsets, availabilityJson, backend: dispatcher.backendFor(context.tenant) };
    },

    async callTool(request, context) {
      // The busiest RPC: its signal is linked by hand, not with AbortSignal.any (see linked-signal.ts).
      const signal = linkSignals(context.signal, shutdownSignal);
      try {
        const resultJson = await dispatcher.callTool(
          context.tenant,
          {
            name: request.name,
            argumentsJson: request.argumentsJson,
            taskId: request.taskId,
            sessionId: request.sessionId,
          },
          // Nobody can be asked during a unary call: park it for Approve (or follow non_interactive).
          { signal: signal.signal, approvalSurface: { kind: interactive(context) ? 'defer' : 'none' } },
        );
        return { resultJson };
      } finally {
        signal.done();
      }
    },

    async *session(requests: AsyncIterable<SessionClientMessage>, context) {
      const out = new AsyncQueue<SessionServerMessage>();
      const signal = callSignal(context);
      const running = new Set<Promise<void>>();
      const approvals = new StreamApprovals((callId, prompt) =>
        out.push({
          message: {
            $case: 'approvalRequest',
            value: {
              approvalId: prompt.approvalId,
              callId,
              command: prompt.command,
              description: prompt.description,
              patternKey: prompt.patternKey,
              choices: [...prompt.choices],
              timeoutSeconds: prompt.timeoutSec,
            },
          },
        }),
      );
      const events = new SessionEvents(dispatcher, context.tenant, AbortSignal.any([signal, drainSignal]), (m) => out.push(m), logger);
      const surfaceFor = (callId: string): ApprovalSurface =>
        interactive(context) ? { kind: 'ask', asker: approvals.askerFor(callId) } : { kind: 'none' };

      const runCall = async (callId: string, msg: NonNullable<SessionClientMessage['message']>) => {
        if (msg.$case !== 'call') return;
        const req = msg.value.request;
        if (!req) throw new InvalidArgumentError('SessionToolCall.request is required');
        let resultJson: string;
        let errorStatus = '';
        try {
          // Before the call runs: an event it causes (a fast background exit) is not missed.
          await events.ensure(req.taskId);
          resultJson = await dispatcher.callTool(
            context.tenant,
            { name: req.name, argumentsJson: req.argumentsJson, taskId: req.taskId, sessionId: req.sessionId },
            {
              signal,
              onOutput: (text) => out.push({ message: { $case: 'output', value: { callId, text } } }),
              approvalSurface: surfaceFor(callId),
            },
          );
        } catch (err) {
          // A failed call must not end the whole stream: report it on this call only.
          const status = toServerError(err, logger, 'Session/call');
          resultJson = JSON.stringify({ error: status.details });
          errorStatus = Status[status.code];
        }
        out.push({ message: { $case: 'result', value: { callId, resultJson, errorStatus } } });
      };

      const pump = (async () => {
        try {
          for await (const m of requests) {
            const msg = m.message;
            if (!msg) continue;
            switch (msg.$case) {
              case 'call': {
                const callId = msg.value.callId;
                if (running.size >= MAX_SESSION_CONCURRENCY) {
                  out.push({
                    message: {
                      $case: 'result',
                      value: {
                        callId,
                        resultJson: JSON.stringify({
                          error: `Too many concurrent calls on this session (max ${MAX_SESSION_CONCURRENCY})`,
                        }),
                        errorStatus: 'RESOURCE_EXHAUSTED',
                      },
                    },
                  });
                  break;
                }
                const p = runCall(callId, msg).finally(() => running.delete(p));
                running.add(p);
                break;
              }
              case 'interrupt':
                await dispatcher.interrupt(context.tenant, msg.value.taskId);
                break;
              case 'approvalAnswer': {
                const { approvalId, choice } = msg.value;
                const answered = approvals.answer(approvalId, choice);
                // A late answer (the ask timed out) is normal; it must not end the stream.
                if (answered !== 'answered') logger.info({ approvalId, choice, answered }, 'approval answer not applied');
                break;
              }
              case 'settings':
                dispatcher.approvals?.setYolo(context.tenant, msg.value.sessionId, msg.value.yolo);
                break;
              case 'subscribeEvents':
                events.subscribe(msg.value.taskId, msg.value.after);
                break;
            }
          }
          // The client stopped sending: nobody can answer approval requests any more.
          approvals.close();
          await Promise.all(running);
        } finally {
          out.close();
        }
      })();

      // On shutdown the stream ends UNAVAILABLE at once, so clients know to retry elsewhere.
      const onShutdown = () => out.close();
      shutdownSignal.addEventListener('abort', onShutdown, { once: true });
      try {
        yield* out;
      } finally {
        shutdownSignal.removeEventListener('abort', onShutdown);
        approvals.close();
        events.close();
        if (shutdownSignal.aborted) pump.catch(() => undefined);
        else await pump;
      }
      if (shutdownSignal.aborted) throw new UnavailableError('Berth is shutting down; retry the call');
    },

    async approve(request, context) {
      const resultJson = await dispatcher.approve(
        context.tenant,
        { approvalId: request.approvalId, choice: request.choice, taskId: request.taskId, sessionId: request.sessionId },
        callSignal(context),
      );
      return { resultJson };
    },

    async interrupt(request, context) {
      return { interrupted: await dispatcher.interrupt(context.tenant, request.taskId) };
    },

    async *taskEvents(request, context) {
      const signal = AbortSignal.any([callSignal(context), drainSignal]);
      const items = dispatcher.taskEvents(context.tenant, request.taskId, { after: request.after, signal });
      for await (const item of items) {
        yield item.kind === 'ready'
          ? { message: { $case: 'ready' as const, value: { taskId: item.taskId, lastId: item.lastId, error: '' } } }
          : { message: { $case: 'event' as const, value: item.event } };
      }
      if (drainSignal.aborted) throw new UnavailableError('Berth is shutting down; reconnect with the last event id you received');
      // The executor's stream never ends while someone follows it, unless that executor stops.
      if (!context.signal.aborted) {
        throw new UnavailableError("the task's executor ended its event stream (restart or drain); reconnect with the last event id you received");
      }
    },

    async endTask(request, context) {
      return { released: await dispatcher.endTask(context.tenant, request.taskId) };
    },

    async suspend(request, context) {
      return dispatcher.suspend(context.tenant, request.taskId);
    },

    async resume(request, context) {
      return { resumed: await dispatcher.resume(context.tenant, request.taskId) };
    },

    async snapshot(request, context) {
      return { snapshot: await dispatcher.snapshots.snapshot(context.tenant, request.taskId, request.label) };
    },

    async fork(request, context) {
      const from = { snapshotId: request.snapshotId, taskId: request.sourceTaskId };
      return dispatcher.snapshots.fork(context.tenant, from, request.taskId, request.label);
    },

    async listSnapshots(_request, context) {
      return { snapshots: await dispatcher.snapshots.list(context.tenant) };
    },

    async deleteSnapshot(request, context) {
      return { deleted: await dispatcher.snapshots.delete(context.tenant, request.snapshotId) };
    },
  };
}
