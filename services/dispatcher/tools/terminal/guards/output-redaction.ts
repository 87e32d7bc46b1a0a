/** Secrets masked in a foreground command's output (`security.redact_secrets`). */
import { redactTerminalOutput } from '../../../redaction/output-redaction.js';
import type { TerminalGuard } from './terminal-guard.js';

/** As upstream: the whole stripped output, its status suffix included, by the command-aware policy. */
export function outputRedactionGuard(redactSecrets: boolean): TerminalGuard {
  return {
    name: 'output-redaction',
    afterRun(outcome) {
      if (redactSecrets) outcome.output = redactTerminalOutput(outcome.output, outcome.call.command);
    },
  };
}
