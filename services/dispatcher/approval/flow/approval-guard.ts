/**
 * The approval guard: decides whether a command a tool is about to run may
 * run, in the order of tool-runtime spec §5:
 *
 *  1. hardline block (never runnable, whatever follows), then the
 *     operator's `approvals.deny` globs (just as final);
 *  2. bypass: mode `off`, the session in yolo mode, or a backend without host
 *     filesystem access when the tenant skips approval in containers;
 *  3. a one-shot grant from an Approve answer for this very command;
 *  4. the permanent allowlist (`command_allowlist`, by pattern key or text);
 *  5. a non-interactive context: approve, or block when it is set to deny;
 *  6. keys already approved for this session;
 *  7. `smart` mode: the auxiliary LLM approves (for the session), denies, or
 *     escalates;
 *  8. the user: asked now (Session stream, up to the timeout; silence
 *     denies), or later (unary CallTool: the call is parked and the pending
 *     result returned, for the Approve RPC to answer).
 *
 * Every tool that runs commands reaches this through the ToolContext's
 * approval hook, so `terminal` in the foreground or background and commands
 * from `execute_code` scripts take the same path.
 */
import { randomBytes } from 'node:crypto';
import { InvalidArgumentError, NotFoundError } from '../../../common/errors.js';
import type { Logger } from '../../../common/logging.js';
import { allowlistApproves, detectAllDangerous } from '../detection/allowlist.js';
import { denyRuleMessage, matchDenyRule, matchDenyRuleInScript } from '../detection/deny-rules.js';
import type { AllowlistPersister, PersistOutcome } from '../storage/allowlist-writer.js';
import type { ApprovalPolicies } from './approval-policy.js';
import {
  blockedResult,
  breakerAddendum,
  hardlineResult,
  nonInteractiveDenyMessage,
  pendingResult,
  smartDenyMessage,
  streamClosedMessage,
  timeoutMessage,
  tooManyPendingMessage,
  userDenyMessage,
} from './approval-results.js';
import {
  APPROVAL_CHOICES,
  isApprovalChoice,
  type ApprovalChoice,
  type ApprovalDecision,
  type ApprovalDecisionSink,
  type ApprovalSurface,
  type GuardedAction,
  type GuardVerdict,
} from '../approval-types.js';
import type { ParkedCall, PendingApproval, PendingApprovals } from '../storage/pending-approvals.js';
import { sessionKeyOf, type SessionApprovals } from '../storage/session-approvals.js';
import type { SmartApprover } from './smart-approval.js';

/** Permission to run one exact command once, from an Approve answer. */
export interface ApprovalGrant {
  readonly command: string;
  readonly keys: readonly string[];
  /** The `approval` note for the result. */
  readonly note: string;
  used: boolean;
}

/** Everything about the call that the flow needs besides the action. */
export interface GuardCall {
  readonly tenant: string;
  readonly taskId: string;
  readonly sessionId: string;
  readonly surface: ApprovalSurface;
  /** The call's signal: aborted when the client goes away or the server shuts down. */
  readonly signal: AbortSignal;
  readonly logger: Logger;
  /** Whether the task's backend can reach the host filesystem; asked only when it matters. */
  readonly hostFilesystem: () => Promise<boolean>;
  /** What the Approve RPC re-runs when this call is parked. */
  readonly parked: ParkedCall;
  readonly grant?: ApprovalGrant;
}

/** The policy lookups the guard uses ({@link ApprovalPolicies} in production). */
export type ApprovalPolicySource = Pick<ApprovalPolicies, 'policyFor' | 'allowlistFor' | 'denyFor' | 'locationFor' | 'addToAllowlist'>;

export interface ApprovalGuardOptions {
  readonly policies: ApprovalPolicySource;
  readonly sessions: SessionApprovals;
  readonly pending: PendingApprovals;
  /** Absent: `smart` mode has no model configured and asks the user directly. */
  readonly smart?: SmartApprover;
  readonly persister: AllowlistPersister;
  /** Home directory folded to `~` before detection. */
  readonly homeDir?: string;
  readonly newApprovalId?: () => string;
  /** Told every decision on a command that needed approval (metrics). */
  readonly onDecision?: ApprovalDecisionSink;
}

/** What an Approve answer leads to. */
export type ApproveOutcome =
  | { readonly kind: 'result'; readonly result: string }
  | { readonly kind: 'rerun'; readonly call: ParkedCall; readonly grant: ApprovalGrant };

export interface ApproveRequestInput {
  readonly approvalId: string;
  readonly choice: string;
  readonly taskId: string;
  readonly sessionId: string;
}

/** What is being decided on: the action with its keys worked out. */
interface Subject {
  readonly command: string;
  readonly keys: readonly string[];
  readonly patternKey: string;
  readonly description: string;
}

/** Logs and reports one decision; `reason` is one of a fixed set of snake_case words (a metrics label). */
type Decide = (decision: ApprovalDecision, reason: string, verdict: GuardVerdict) => GuardVerdict;

function defaultApprovalId(): string {
  return `appr_${randomBytes(12).toString('hex')}`;
}

function userNote(description: string): string {
  return `Command required approval (${description}) and was approved by the user.`;
}

function persistNote(outcome: PersistOutcome): string {
  return outcome.kind === 'saved'
    ? ` It was added to command_allowlist in ${outcome.file} and will not be asked about again.`
    : ` It is approved permanently only until the server stops: ${outcome.reason}, so command_allowlist was not saved.`;
}

export class ApprovalGuard {
  readonly #o: ApprovalGuardOptions;
  readonly #newId: () => string;

  constructor(options: ApprovalGuardOptions) {
    this.#o = options;
    this.#newId = options.newApprovalId ?? defaultApprovalId;
  }

  /** Decides on one action; see the module comment for the order. */
  async check(action: GuardedAction, call: GuardCall): Promise<GuardVerdict> {
    const log = call.logger.child({ approvalTool: action.tool });
    let keys: string[] = [];
    if (action.detect !== false) {
      const found = detectAllDangerous(action.command, this.#o.homeDir === undefined ? {} : { homeDir: this.#o.homeDir });
      if (found.hardline !== undefined) {
        log.warn({ hardline: found.hardline.description }, 'approval: hardline block');
        this.#o.onDecision?.('blocked', 'hardline');
        return { allowed: false, result: hardlineResult(found.hardline.description) };
      }
      keys = [...found.keys];
    }
    // The operator's (and tenant's) deny rules: before every bypass, like the hardline floor.
    const denyGlobs = this.#o.policies.denyFor(call.tenant);
    const denied =
      action.detect === false
        ? matchDenyRuleInScript(denyGlobs, action.command)
        : matchDenyRule(denyGlobs, action.command, this.#o.homeDir === undefined ? {} : { homeDir: this.#o.homeDir });
    if (denied !== undefined) {
      log.warn({ denyRule: denied }, 'approval: deny rule block');
      this.#o.onDecision?.('blocked', 'deny_rule');
      return { allowed: false, result: blockedResult(denyRuleMessage(denied)) };
    }
    if (action.patternKey !== undefined) keys = [action.patternKey, ...keys.filter((k) => k !== action.patternKey)];
    if (keys.length === 0) return { allowed: true };

    const first = keys[0]!;
    const firstDescription = action.patternKey === first ? (action.description ?? first) : first;
    const subject: Subject = {
      command: action.command,
      keys,
      patternKey: first,
      description: keys.length === 1 ? firstDescription : `${firstDescription}; also: ${keys.slice(1).join(', ')}`,
    };
    const decide: Decide = (decision, reason, verdict) => {
      log.info({ patternKey: subject.patternKey, keys, decision, reason }, 'approval decision');
      // The re-run of a call answered through Approve was counted when the answer came.
      if (reason !== 'approve_answer') this.#o.onDecision?.(decision, reason);
      return verdict;
    };

    const { tenant } = call;
    const policy = this.#o.policies.policyFor(tenant);
    const sessionKey = sessionKeyOf(call.sessionId, call.taskId);

    if (policy.mode === 'off') return decide('bypassed', 'mode_off', { allowed: true });
    if (this.#o.sessions.isYolo(tenant, sessionKey)) return decide('bypassed', 'yolo', { allowed: true });
    if (policy.skipInContainers && !(await this.#hostFilesystem(call, log))) {
      return decide('bypassed', 'container', { allowed: true });
    }

    const grant = call.grant;
    if (grant !== undefined && !grant.used && grant.command === action.command && keys.every((k) => grant.keys.includes(k))) {
      grant.used = true;
      return decide('approved', 'approve_answer', { allowed: true, note: grant.note });
    }

    if (allowlistApproves(this.#o.policies.allowlistFor(tenant), action.command, keys)) {
      return decide('approved', 'allowlist', { allowed: true });
    }

    if (call.surface.kind === 'none') {
      if (policy.nonInteractive === 'deny') {
        return decide('blocked', 'non_interactive', { allowed: false, result: blockedResult(nonInteractiveDenyMessage(subject.description)) });
      }
      return decide('approved', 'non_interactive', { allowed: true });
    }

    if (this.#o.sessions.approvedAll(tenant, sessionKey, keys)) return decide('approved', 'session', { allowed: true });

    if (policy.mode === 'smart' && this.#o.smart !== undefined) {
      const verdict = await this.#o.smart.assess(action.command, subject.description, call.signal);
      if (verdict === 'approve') {
        this.#o.sessions.resetDenials(tenant, sessionKey);
        this.#o.sessions.approve(tenant, sessionKey, keys);
        return decide('approved', 'smart', {
          allowed: true,
          note: `Command required approval (${subject.description}) and was approved by smart approval.`,
        });
      }
      if (verdict === 'deny') {
        const breaker = breakerAddendum(this.#o.sessions.recordDenial(tenant, sessionKey), policy.denialBreakerThreshold);
        return decide('blocked', 'smart', { allowed: false, result: blockedResult(smartDenyMessage(subject.description, breaker)) });
      }
    }

    if (call.surface.kind === 'defer') {
      const approvalId = this.#newId();
      const parked = this.#o.pending.add(
        {
          approvalId,
          tenant,
          sessionKey,
          command: action.command,
          description: subject.description,
          keys,
          call: call.parked,
        },
        policy.timeoutMs,
        policy.maxPending,
      );
      if (!parked) {
        return decide('blocked', 'too_many_pending', { allowed: false, result: blockedResult(tooManyPendingMessage(policy.maxPending)) });
      }
      log.info({ approvalId, patternKey: subject.patternKey }, 'approval pending');
      this.#o.onDecision?.('pending', 'approve_rpc');
      return {
        allowed: false,
        result: pendingResult({
          command: action.command,
          description: subject.description,
          patternKey: subject.patternKey,
          approvalId,
        }),
      };
    }

    return this.#ask(call.surface.asker, subject, call, policy.timeoutMs, sessionKey, decide);
  }

  async #hostFilesystem(call: GuardCall, log: Logger): Promise<boolean> {
    try {
      return await call.hostFilesystem();
    } catch (err) {
      if (call.signal.aborted) throw call.signal.reason;
      // Unknown means "assume the host is reachable": approval is only skipped when known safe.
      log.warn({ err }, 'approval: backend capabilities unknown; not skipping approval');
      return true;
    }
  }

  async #ask(
    asker: Extract<ApprovalSurface, { kind: 'ask' }>['asker'],
    subject: Subject,
    call: GuardCall,
    timeoutMs: number,
    sessionKey: string,
    decide: Decide,
  ): Promise<GuardVerdict> {
    call.signal.throwIfAborted();
    const timeoutSec = Math.max(1, Math.round(timeoutMs / 1000));
    const timer = new AbortController();
    const handle = setTimeout(() => timer.abort(new Error('approval timed out')), timeoutMs);
    let outcome;
    try {
      outcome = await asker.ask(
        {
          approvalId: this.#newId(),
          command: subject.command,
          description: subject.description,
          patternKey: subject.patternKey,
          choices: APPROVAL_CHOICES,
          timeoutSec,
        },
        AbortSignal.any([call.signal, timer.signal]),
      );
    } catch (err) {
      if (call.signal.aborted) throw call.signal.reason;
      if (timer.signal.aborted) {
        const breaker = breakerAddendum(this.#o.sessions.denials(call.tenant, sessionKey), this.#o.policies.policyFor(call.tenant).denialBreakerThreshold);
        return decide('blocked', 'timeout', { allowed: false, result: blockedResult(timeoutMessage(breaker)) });
      }
      throw err;
    } finally {
      clearTimeout(handle);
    }
    if (outcome.kind === 'closed') {
      return decide('blocked', 'stream_closed', { allowed: false, result: blockedResult(streamClosedMessage(subject.description)) });
    }
    const note = await this.#record(call.tenant, sessionKey, subject, outcome.choice);
    if (note === undefined) {
      const breaker = breakerAddendum(this.#o.sessions.denials(call.tenant, sessionKey), this.#o.policies.policyFor(call.tenant).denialBreakerThreshold);
      return decide('blocked', 'user_deny', { allowed: false, result: blockedResult(userDenyMessage(breaker)) });
    }
    return decide('approved', `user_${outcome.choice}`, { allowed: true, note });
  }

  /** Records a user's choice; returns the result note, or undefined for deny. */
  async #record(tenant: string, sessionKey: string, subject: Subject, choice: ApprovalChoice): Promise<string | undefined> {
    if (choice === 'deny') return undefined;
    // A human approval ends a streak of smart-approval denials, as upstream.
    this.#o.sessions.resetDenials(tenant, sessionKey);
    let note = userNote(subject.description);
    if (choice === 'session' || choice === 'always') this.#o.sessions.approve(tenant, sessionKey, subject.keys);
    if (choice === 'always') {
      // Only pattern keys are stored: they are what the spec's allowlist holds, and text
      // entries would be skipped for commands with operators anyway.
      const added = this.#o.policies.addToAllowlist(tenant, subject.keys);
      note +=
        added.length === 0
          ? ' It was in command_allowlist already.'
          : persistNote(await this.#o.persister.persist(this.#o.policies.locationFor(tenant), added));
    }
    return note;
  }

  /**
   * Answers a parked unary call (the Approve RPC). Deny gives the blocked
   * result at once; the other choices are recorded and the call is handed
   * back to be run again, with a grant that lets exactly this command through.
   */
  async approve(tenant: string, request: ApproveRequestInput): Promise<ApproveOutcome> {
    if (!isApprovalChoice(request.choice)) {
      throw new InvalidArgumentError(`choice must be one of ${APPROVAL_CHOICES.join(', ')}; got '${request.choice}'`);
    }
    const pending = this.#o.pending.take(tenant, request.approvalId);
    if (pending === undefined || !this.#matches(pending, request)) {
      if (pending !== undefined) this.#o.pending.restore(pending);
      throw new NotFoundError(
        `no pending approval with id '${request.approvalId}'` +
          (request.taskId === '' ? '' : ` for task '${request.taskId}'`) +
          ': it was answered already, expired (silence is not consent), or never existed',
      );
    }
    const subject: Subject = {
      command: pending.command,
      keys: pending.keys,
      patternKey: pending.keys[0] ?? '',
      description: pending.description,
    };
    const note = await this.#record(tenant, pending.sessionKey, subject, request.choice);
    this.#o.onDecision?.(note === undefined ? 'blocked' : 'approved', `user_${request.choice}`);
    if (note === undefined) {
      const breaker = breakerAddendum(this.#o.sessions.denials(tenant, pending.sessionKey), this.#o.policies.policyFor(tenant).denialBreakerThreshold);
      return { kind: 'result', result: blockedResult(userDenyMessage(breaker)) };
    }
    return { kind: 'rerun', call: pending.call, grant: { command: pending.command, keys: pending.keys, note, used: false } };
  }

  #matches(pending: PendingApproval, request: ApproveRequestInput): boolean {
    if (request.taskId !== '' && request.taskId !== pending.call.taskId) return false;
    if (request.sessionId !== '' && request.sessionId !== pending.call.sessionId) return false;
    return true;
  }

  /** Puts a session in or out of yolo mode; false when the tenant's policy does not allow it. */
  setYolo(tenant: string, sessionKey: string, enabled: boolean): boolean {
    if (enabled && !this.#o.policies.policyFor(tenant).allowYolo) return false;
    this.#o.sessions.setYolo(tenant, sessionKey, enabled);
    return true;
  }

  /** Forgets the approvals of a task's implicit session (the task ended). */
  forgetTask(tenant: string, taskId: string): void {
    this.#o.sessions.clear(tenant, sessionKeyOf('', taskId));
  }
}
