/**
 * The terminal tool's guards, in the order they apply. Before a command
 * runs, each guard in turn may refuse the call or fill in and rewrite it
 * (`foreground` ones only for foreground calls); after a foreground command
 * ran, each shapes the result. A new guard is one file implementing
 * TerminalGuard and one line here.
 */
import { approvalGuard } from './approval.js';
import { backgroundChainGuard } from './background-chain.js';
import { exitCodeMeaningGuard } from './exit-code-meaning.js';
import { failureHintsGuard } from './failure-hints.js';
import { foregroundHazardGuard } from './foreground-hazard.js';
import { foregroundTimeoutGuard } from './foreground-timeout.js';
import { outputRedactionGuard } from './output-redaction.js';
import type { TerminalGuard } from './terminal-guard.js';
import { workdirGuard } from './workdir.js';

/** What the guards take from the terminal tool's options. */
export interface GuardPipelineOptions {
  readonly maxForegroundTimeoutSec: number;
  readonly redactSecrets: boolean;
}

export function terminalGuardPipeline(options: GuardPipelineOptions): readonly TerminalGuard[] {
  return [
    // The arguments first, in the reference tool's order.
    workdirGuard,
    foregroundTimeoutGuard(options.maxForegroundTimeoutSec),
    foregroundHazardGuard,
    // Asked after every check that refuses on its own, so nobody is asked about a command that would be
    // refused anyway; and before the rewrite, so the user approves the command the model sent.
    approvalGuard,
    backgroundChainGuard,
    // After a foreground command: masked first, so the meaning and the hint read the output the model will.
    outputRedactionGuard(options.redactSecrets),
    exitCodeMeaningGuard,
    // A meaning replaces the failure hint, so this comes after it.
    failureHintsGuard,
  ];
}
