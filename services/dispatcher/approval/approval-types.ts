/**
 * Types of the approval flow shared by the guard, the tools that ask it, the
 * dispatcher and the gRPC adapter. Kept free of runtime code so tool-types.ts
 * can refer to them without loading the flow.
 */

/** The user's four answers, as the spec and the proto spell them. */
export const APPROVAL_CHOICES = ['once', 'session', 'always', 'deny'] as const;
export type ApprovalChoice = (typeof APPROVAL_CHOICES)[number];

/** True for one of {@link APPROVAL_CHOICES}. */
export function isApprovalChoice(value: string): value is ApprovalChoice {
  return (APPROVAL_CHOICES as readonly string[]).includes(value);
}

/** Something a tool wants to run that may need approval. */
export interface GuardedAction {
  /** The tool asking: `terminal`, `execute_code`, ... (for logs and the prompt). */
  readonly tool: string;
  /** The command text (or script) as the model sent it. */
  readonly command: string;
  /**
   * Ask under this key instead of detecting one: used for actions that are not
   * shell commands (an `execute_code` script where policy asks). Hardline and
   * pattern detection still run on `command` unless `detect` is false.
   */
  readonly patternKey?: string;
  /** Shown with `patternKey`; defaults to it. */
  readonly description?: string;
  /** Run hardline and pattern detection on `command` (default true). */
  readonly detect?: boolean;
}

/** The guard's answer to one action. */
export type GuardVerdict =
  | {
      readonly allowed: true;
      /** Set when the command needed approval and got it: goes to the result's `approval` field. */
      readonly note?: string;
    }
  | {
      readonly allowed: false;
      /** The result string the model sees instead of the command's output. */
      readonly result: string;
    };

/**
 * The hook a ToolContext carries: every tool that runs commands asks it before
 * running anything. Rejects only for infrastructure failures (the call was
 * cancelled, the server is shutting down); a refusal is a verdict.
 */
export type ApprovalHook = (action: GuardedAction) => Promise<GuardVerdict>;

/** What the user is asked. */
export interface ApprovalPrompt {
  readonly approvalId: string;
  readonly command: string;
  readonly description: string;
  readonly patternKey: string;
  readonly choices: readonly ApprovalChoice[];
  readonly timeoutSec: number;
}

/** How an ask ended, when it ended without an infrastructure failure. */
export type AskOutcome =
  | { readonly kind: 'answer'; readonly choice: ApprovalChoice }
  /** Nobody is left to answer (the Session stream closed). */
  | { readonly kind: 'closed' };

/**
 * An interactive surface (a Session stream, a terminal). `ask` settles when
 * the user answers, or when `signal` aborts (timeout or cancellation) by
 * rejecting with the signal's reason.
 */
export interface ApprovalAsker {
  ask(prompt: ApprovalPrompt, signal: AbortSignal): Promise<AskOutcome>;
}

/**
 * Where a call came from, for the approval flow:
 * - `ask`: someone can be asked now (Session stream).
 * - `defer`: nobody can be asked now, but the caller can answer later with
 *   the Approve RPC (unary CallTool): the call is parked as pending.
 * - `none`: a non-interactive context (the client said so): no one will ever answer.
 */
export type ApprovalSurface =
  | { readonly kind: 'ask'; readonly asker: ApprovalAsker }
  | { readonly kind: 'defer' }
  | { readonly kind: 'none' };

/** How an approval check ended: approved, blocked, bypassed (approval did not apply), or pending (parked for Approve). */
export type ApprovalDecision = 'approved' | 'blocked' | 'bypassed' | 'pending';

/** Where the guard reports each decision on a command that needed approval (metrics). */
export type ApprovalDecisionSink = (decision: ApprovalDecision, reason: string) => void;
