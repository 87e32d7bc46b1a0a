/**
 * The approval flow as the dispatcher uses it: builds the guard from config
 * and gives each call its ToolContext hook, bound to that call's tenant,
 * session, surface and executor.
 */
import { homedir } from 'node:os';
import type { BerthConfig } from '../../../common/config.js';
import { PermissionDeniedError, InvalidArgumentError } from '../../../common/errors.js';
import type { Logger } from '../../../common/logging.js';
import type { ExecutorClient } from '../../../gen/berth/v1/executor.js';
import { ConfigFileAllowlist, type AllowlistPersister } from '../storage/allowlist-writer.js';
import { ApprovalGuard, type ApprovalGrant } from './approval-guard.js';
import { ApprovalPolicies } from './approval-policy.js';
import type { ApprovalDecisionSink, ApprovalHook, ApprovalSurface } from '../approval-types.js';
import { PendingApprovals, type ParkedCall } from '../storage/pending-approvals.js';
import { SessionApprovals, sessionKeyOf } from '../storage/session-approvals.js';
import { ChatCompletionsSmartApprover, type SmartApprover } from './smart-approval.js';

export interface ApprovalServiceOptions {
  readonly config: Pick<BerthConfig, 'approvals' | 'tenants' | 'command_allowlist'>;
  /** The config file "always" answers are written to; undefined = none (kept in memory). */
  readonly configPath?: string;
  readonly logger: Logger;
  /** The smart-approval API key (read by the main from the env var `approvals.smart.api_key_env` names). */
  readonly smartApiKey?: string;
  /** Replaces the HTTP smart approver (tests). */
  readonly smart?: SmartApprover;
  readonly persister?: AllowlistPersister;
  readonly homeDir?: string;
  /** Told every approval decision (metrics). */
  readonly onDecision?: ApprovalDecisionSink;
}

/** What the dispatcher knows about one call. */
export interface ApprovalCall {
  readonly tenant: string;
  readonly taskId: string;
  readonly sessionId: string;
  readonly surface: ApprovalSurface;
  readonly signal: AbortSignal;
  readonly logger: Logger;
  readonly executorId: string;
  readonly executor: Pick<ExecutorClient, 'capabilities'>;
  readonly parked: ParkedCall;
  readonly grant?: ApprovalGrant;
}

export class ApprovalService {
  readonly guard: ApprovalGuard;
  readonly #hostFilesystem = new Map<string, Promise<boolean>>();

  constructor(options: ApprovalServiceOptions) {
    const { config, logger } = options;
    const smartConfig = config.approvals.smart;
    const smart =
      options.smart ??
      (smartConfig.base_url !== ''
        ? new ChatCompletionsSmartApprover({
            baseUrl: smartConfig.base_url,
            model: smartConfig.model,
            apiKey: options.smartApiKey ?? '',
            timeoutMs: smartConfig.timeout * 1000,
            logger: logger.child({ component: 'smart-approval' }),
          })
        : undefined);
    this.guard = new ApprovalGuard({
      policies: new ApprovalPolicies(config),
      sessions: new SessionApprovals(),
      pending: new PendingApprovals(),
      ...(smart === undefined ? {} : { smart }),
      persister: options.persister ?? new ConfigFileAllowlist(options.configPath, logger),
      homeDir: options.homeDir ?? homedir(),
      ...(options.onDecision === undefined ? {} : { onDecision: options.onDecision }),
    });
  }

  /** The ToolContext hook for one call. */
  hookFor(call: ApprovalCall): ApprovalHook {
    return (action) =>
      this.guard.check(action, {
        tenant: call.tenant,
        taskId: call.taskId,
        sessionId: call.sessionId,
        surface: call.surface,
        signal: call.signal,
        logger: call.logger,
        parked: call.parked,
        hostFilesystem: () => this.#hostFilesystemOf(call),
        ...(call.grant === undefined ? {} : { grant: call.grant }),
      });
  }

  /** Whether an executor's backend reaches the host filesystem (Capabilities RPC, cached per executor). */
  #hostFilesystemOf(call: ApprovalCall): Promise<boolean> {
    let known = this.#hostFilesystem.get(call.executorId);
    if (known === undefined) {
      known = call.executor.capabilities({}, { signal: call.signal }).then((c) => c.hostFilesystem);
      // A failure is not remembered: the next call asks again.
      known.catch(() => this.#hostFilesystem.delete(call.executorId));
      this.#hostFilesystem.set(call.executorId, known);
    }
    return known;
  }

  /** Session yolo on or off, for a Session client; refused when the tenant's policy forbids it. */
  setYolo(tenant: string, sessionId: string, enabled: boolean): void {
    if (sessionId === '') throw new InvalidArgumentError('SessionSettings.session_id is required to set yolo');
    if (!this.guard.setYolo(tenant, sessionKeyOf(sessionId, ''), enabled)) {
      throw new PermissionDeniedError(`yolo mode is not allowed for tenant '${tenant}' (approvals.allow_yolo: false)`);
    }
  }
}

export { INTERACTIVE_HEADER, isInteractive } from './interactive-header.js';
