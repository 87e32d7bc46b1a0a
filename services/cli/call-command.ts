/**
 * `berth call`: one tool call over the Session stream (so approvals can be
 * asked on the terminal), its result on stdout as the model reads it, and
 * an exit status a CI job can branch on (see call-outcome.ts).
 */
import type { Metadata } from 'nice-grpc-common';
import { INTERACTIVE_HEADER } from '../dispatcher/approval/flow/interactive-header.js';
import { promptApproval } from './approval-prompt.js';
import type { CallClient } from './http2-client.js';
import { EXIT, checkArgumentsJson, exitStatusOfResult, hintFor, toolSummaries } from './call-outcome.js';
import { SessionConnection } from './session-connection.js';
import { UsageError } from './usage.js';

export interface CallOptions {
  readonly tool: string;
  readonly argumentsJson: string;
  readonly taskId: string;
  readonly sessionId: string;
  readonly nonInteractive: boolean;
  readonly metadata: Metadata;
  readonly stdout: { write(text: string): unknown };
  readonly stderr: { write(text: string): unknown };
}

/** What the prompt says when nobody can be asked: the way to let a policy decide instead. */
export const NO_TERMINAL_HINT =
  "where nobody can answer (CI), pass --non-interactive (or BERTH_NON_INTERACTIVE=true) and the server's approvals.non_interactive policy decides";

/** `BERTH_NON_INTERACTIVE`: 1, true, yes or on. */
export function nonInteractiveFromEnv(env: NodeJS.ProcessEnv): boolean {
  return ['1', 'true', 'yes', 'on'].includes((env.BERTH_NON_INTERACTIVE ?? '').trim().toLowerCase());
}

/** Positionals of `berth call` into tool and arguments; a mistake is a UsageError. */
export function callPositionals(positionals: readonly string[]): { tool: string; argumentsJson: string } {
  const [tool, argumentsJson = '{}', ...rest] = positionals;
  if (!tool) throw new UsageError("call needs a tool name, e.g. berth call terminal '{\"command\":\"ls\"}' ('berth tools' lists the tools)");
  if (rest.length > 0) {
    throw new UsageError(`unexpected arguments after ARGS_JSON: ${rest.join(' ')}; quote ARGS_JSON as one argument, e.g. '{"command":"ls -l"}'`);
  }
  return { tool, argumentsJson };
}

/** Runs the call; resolves with the exit status. Failures of the call itself reject (the caller maps them). */
export async function runCall(client: CallClient, options: CallOptions): Promise<number> {
  const args = checkArgumentsJson(options.tool, options.argumentsJson);
  const abort = new AbortController();
  const onSigint = () => abort.abort();
  process.once('SIGINT', onSigint);
  if (options.nonInteractive) options.metadata.set(INTERACTIVE_HEADER, 'false');
  const session = new SessionConnection(
    client,
    {
      onApproval: (request, signal) =>
        promptApproval(request, { input: process.stdin, output: options.stderr, noTerminalHint: NO_TERMINAL_HINT }, signal),
    },
    { metadata: options.metadata, signal: abort.signal },
  );
  let resultJson: string;
  try {
    resultJson = await session.call({
      name: options.tool,
      argumentsJson: options.argumentsJson,
      taskId: options.taskId,
      sessionId: options.sessionId,
    });
  } finally {
    process.off('SIGINT', onSigint);
    await session.close().catch(() => undefined);
  }
  options.stdout.write(`${resultJson}\n`);
  const status = exitStatusOfResult(resultJson);
  if (status === EXIT.toolError) {
    // Only a failed call pays for the listing the hint needs.
    const hint = await client
      .listTools({ enabledToolsets: [], disabledToolsets: [], explain: false }, { metadata: options.metadata })
      .then((r) => hintFor(options.tool, args, resultJson, toolSummaries(r.toolsJson)))
      .catch(() => undefined);
    if (hint !== undefined) options.stderr.write(`berth: ${hint}\n`);
  }
  return status;
}
