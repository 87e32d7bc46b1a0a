/**
 * gRPC adapter for the Dispatcher service: converts messages and wires the
 * Session stream; the work happens in {@link Dispatcher}.
 */
import type { CallContext } from 'nice-grpc';
import { AsyncQueue } from '../common/async-queue.js';
import { InvalidArgumentError, NotFoundError } from '../common/errors.js';
import type { Logger } from '../common/logging.js';
import type {
  DispatcherServiceImplementation,
  SessionClientMessage,
  SessionServerMessage,
} from '../gen/berth/v1/dispatcher.js';
import type { Dispatcher } from './dispatcher.js';
import { toServerError } from '../common/grpc-errors.js';
import type { TenantContext } from './tenants.js';

/** Most tool calls one Session may run at once; more are refused with an error result. */
const MAX_SESSION_CONCURRENCY = 64;

export function createDispatcherService(
  dispatcher: Dispatcher,
  logger: Logger,
  shutdownSignal: AbortSignal,
): DispatcherServiceImplementation<TenantContext> {
  const callSignal = (context: CallContext) => AbortSignal.any([context.signal, shutdownSignal]);

  return {
    async listTools(request) {
      const { tools, unknownToolsets } = await dispatcher.listTools(
        request.enabledToolsets,
        request.disabledToolsets,
      );
      return { toolsJson: JSON.stringify(tools), unknownToolsets };
    },

    async callTool(request, context) {
      const resultJson = await dispatcher.callTool(
        context.tenant,
        {
          name: request.name,
          argumentsJson: request.argumentsJson,
          taskId: request.taskId,
          sessionId: request.sessionId,
        },
        { signal: callSignal(context) },
      );
      return { resultJson };
    },

    async *session(requests: AsyncIterable<SessionClientMessage>, context) {
      const out = new AsyncQueue<SessionServerMessage>();
      const signal = callSignal(context);
      const running = new Set<Promise<void>>();

      const runCall = async (callId: string, msg: NonNullable<SessionClientMessage['message']>) => {
        if (msg.$case !== 'call') return;
        const req = msg.value.request;
        if (!req) throw new InvalidArgumentError('SessionToolCall.request is required');
        let resultJson: string;
        try {
          resultJson = await dispatcher.callTool(
            context.tenant,
            { name: req.name, argumentsJson: req.argumentsJson, taskId: req.taskId, sessionId: req.sessionId },
            {
              signal,
              onOutput: (text) => out.push({ message: { $case: 'output', value: { callId, text } } }),
            },
          );
        } catch (err) {
          // A failed call must not end the whole stream: report it on this call only.
          const status = toServerError(err, logger, 'Session/call');
          resultJson = JSON.stringify({ error: status.details });
        }
        out.push({ message: { $case: 'result', value: { callId, resultJson } } });
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
              case 'approvalAnswer':
                throw new NotFoundError(`no pending approval with id '${msg.value.approvalId}'`);
            }
          }
          await Promise.all(running);
        } finally {
          out.close();
        }
      })();

      try {
        yield* out;
      } finally {
        await pump;
      }
    },

    async approve(request) {
      throw new NotFoundError(
        `no pending approval with id '${request.approvalId}' for task '${request.taskId}'`,
      );
    },

    async interrupt(request, context) {
      return { interrupted: await dispatcher.interrupt(context.tenant, request.taskId) };
    },

    async endTask(request, context) {
      return { released: await dispatcher.endTask(context.tenant, request.taskId) };
    },
  };
}
