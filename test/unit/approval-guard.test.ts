import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { parseConfig } from '../../services/common/config-load.js';
import { BerthError } from '../../services/common/errors.js';
import { silentLogger } from '../../services/common/logging.js';
import type { AllowlistLocation, AllowlistPersister, PersistOutcome } from '../../services/dispatcher/approval/storage/allowlist-writer.js';
import { ApprovalGuard, type GuardCall } from '../../services/dispatcher/approval/flow/approval-guard.js';
import { ApprovalPolicies } from '../../services/dispatcher/approval/flow/approval-policy.js';
import type {
  ApprovalAsker,
  ApprovalDecisionSink,
  ApprovalPrompt,
  ApprovalSurface,
  AskOutcome,
  GuardVerdict,
} from '../../services/dispatcher/approval/approval-types.js';
import { requestApproval } from '../../services/dispatcher/approval/flow/guard-hook.js';
import { PendingApprovals } from '../../services/dispatcher/approval/storage/pending-approvals.js';
import { SessionApprovals } from '../../services/dispatcher/approval/storage/session-approvals.js';
import type { SmartApprover, SmartVerdict } from '../../services/dispatcher/approval/flow/smart-approval.js';
import { StreamApprovals } from '../../services/dispatcher/approval/flow/stream-approvals.js';

const DANGEROUS = "bash -c 'echo hi'"; // shell command via -c/-lc flag
const STOP =
  ' The user has NOT consented to this action. Do NOT retry this command, do NOT rephrase it, and do NOT attempt the same outcome via a different command. Stop the current workflow and wait for the user to respond before taking any further destructive or irreversible action.';
const KEY = 'shell command via -c/-lc flag';

/** An asker that answers from a script and records what it was asked. */
class FakeAsker implements ApprovalAsker {
  readonly prompts: ApprovalPrompt[] = [];
  constructor(private readonly answer: (prompt: ApprovalPrompt, signal: AbortSignal) => Promise<AskOutcome> | AskOutcome) {}
  async ask(prompt: ApprovalPrompt, signal: AbortSignal): Promise<AskOutcome> {
    this.prompts.push(prompt);
    return this.answer(prompt, signal);
  }
}

const answering = (choice: 'once' | 'session' | 'always' | 'deny') => new FakeAsker(() => ({ kind: 'answer', choice }));

/** Never answers: settles only when the signal aborts. */
const silent = () =>
  new FakeAsker(
    (_p, signal) =>
      new Promise<AskOutcome>((_resolve, reject) => {
        if (signal.aborted) reject(signal.reason as Error);
        signal.addEventListener('abort', () => reject(signal.reason as Error));
      }),
  );

class RecordingPersister implements AllowlistPersister {
  readonly calls: Array<{ location: AllowlistLocation; keys: readonly string[] }> = [];
  async persist(location: AllowlistLocation, keys: readonly string[]): Promise<PersistOutcome> {
    this.calls.push({ location, keys });
    return { kind: 'saved', file: '/etc/berth/config.yaml' };
  }
}

class FakeSmart implements SmartApprover {
  readonly asked: string[] = [];
  constructor(public verdict: SmartVerdict) {}
  async assess(command: string): Promise<SmartVerdict> {
    this.asked.push(command);
    return this.verdict;
  }
}

interface Fixture {
  guard: ApprovalGuard;
  persister: RecordingPersister;
  sessions: SessionApprovals;
  pending: PendingApprovals;
}

function fixture(
  raw: Record<string, unknown> = {},
  extra: { smart?: SmartApprover; now?: () => number; onDecision?: ApprovalDecisionSink } = {},
): Fixture {
  const config = parseConfig(raw);
  const persister = new RecordingPersister();
  const sessions = new SessionApprovals();
  const pending = new PendingApprovals(extra.now);
  let n = 0;
  const guard = new ApprovalGuard({
    policies: new ApprovalPolicies(config),
    sessions,
    pending,
    persister,
    ...(extra.smart ? { smart: extra.smart } : {}),
    ...(extra.onDecision ? { onDecision: extra.onDecision } : {}),
    homeDir: '/home/tester',
    newApprovalId: () => `appr_${++n}`,
  });
  return { guard, persister, sessions, pending };
}

function call(surface: ApprovalSurface, overrides: Partial<GuardCall> = {}): GuardCall {
  return {
    tenant: 'default',
    taskId: 't1',
    sessionId: 's1',
    surface,
    signal: new AbortController().signal,
    logger: silentLogger(),
    hostFilesystem: async () => true,
    parked: { name: 'terminal', argumentsJson: JSON.stringify({ command: DANGEROUS }), taskId: 't1', sessionId: 's1' },
    ...overrides,
  };
}

const ask = (asker: ApprovalAsker): ApprovalSurface => ({ kind: 'ask', asker });
const check = (f: Fixture, command: string, c: GuardCall) => f.guard.check({ tool: 'terminal', command }, c);

function blocked(verdict: GuardVerdict): Record<string, unknown> {
  assert.equal(verdict.allowed, false, 'expected a refusal');
  return JSON.parse((verdict as { result: string }).result) as Record<string, unknown>;
}

describe('approval guard: hardline', () => {
  it('blocks with the spec prefix and the terminal error shape, and asks nobody', async () => {
    const f = fixture();
    const asker = answering('once');
    const result = blocked(await check(f, 'rm -rf /', call(ask(asker))));
    assert.equal(result.output, '');
    assert.equal(result.exit_code, -1);
    assert.equal(result.status, 'blocked');
    assert.match(String(result.error), /^BLOCKED \(hardline\): recursive delete of root filesystem\. /);
    assert.deepEqual(Object.keys(result), ['output', 'exit_code', 'error', 'status']);
    assert.equal(asker.prompts.length, 0);
  });

  it('cannot be lifted by mode off, yolo, the allowlist or containers', async () => {
    const f = fixture({ approvals: { mode: 'off' }, command_allowlist: ['*', 'rm -rf /', 'recursive delete'] });
    f.sessions.setYolo('default', 'session:s1', true);
    const c = call(ask(answering('once')), { hostFilesystem: async () => false });
    for (const command of ['rm -rf /', 'mkfs.ext4 /dev/sda1', ':(){ :|:& };:', 'shutdown -h now', 'kill -1']) {
      assert.match(String(blocked(await check(f, command, c)).error), /^BLOCKED \(hardline\)/, command);
    }
  });

  it('without a guard in the context, hardline still blocks and the rest runs', async () => {
    assert.equal((await requestApproval({}, { tool: 'terminal', command: 'rm -rf ~' })).allowed, false);
    assert.deepEqual(await requestApproval({}, { tool: 'terminal', command: DANGEROUS }), { allowed: true });
  });
});

describe('approval guard: approvals.deny', () => {
  const DENY_TEXT = (glob: string) =>
    `BLOCKED: this command matches the user-defined deny rule '${glob}' (approvals.deny in config.yaml). It cannot be executed via the agent — not even with --yolo, /yolo, or approvals.mode=off. Do NOT retry or rephrase this command; the user has explicitly forbidden it.`;

  it('blocks a matching command with upstream\'s text, whatever mode, yolo, allowlist or container says', async () => {
    const f = fixture({ approvals: { mode: 'off', deny: ['git push --force*', '  '] }, command_allowlist: ['*', 'git push --force origin main'] });
    f.sessions.setYolo('default', 'session:s1', true);
    const asker = answering('once');
    const c = call(ask(asker), { hostFilesystem: async () => false });
    const result = blocked(await check(f, 'git push --force origin main', c));
    assert.deepEqual(result, { output: '', exit_code: -1, error: DENY_TEXT('git push --force*'), status: 'blocked' });
    assert.equal(asker.prompts.length, 0);
    assert.equal((await check(f, 'git push origin main', c)).allowed, true);
  });

  it('matches case-insensitively over the variants, so quoting and wrappers do not get around it', async () => {
    const f = fixture({ approvals: { deny: ['GIT PUSH --FORCE*'] } });
    const c = call(ask(answering('once')));
    for (const command of ['git push --force', 'git p""ush --force x', 'g\\it push --force', 'cd /repo && sudo env A=1 git push --force', 'Git Push --Force']) {
      assert.match(String(blocked(await check(f, command, c)).error), /^BLOCKED: this command matches the user-defined deny rule 'GIT PUSH --FORCE\*'/, command);
    }
    assert.equal((await check(f, 'echo "git push --force is forbidden here"', c)).allowed, true);
  });

  it('adds a tenant\'s own rules to the operator\'s for that tenant only', async () => {
    const f = fixture({
      allow_local_multi_tenant: true,
      approvals: { deny: ['terraform destroy*'] },
      tenants: [
        { id: 'ci', api_key_sha256: 'a'.repeat(64), approvals: { deny: ['npm publish*'] } },
        { id: 'web', api_key_sha256: 'b'.repeat(64) },
      ],
    });
    const c = (tenant: string) => call(ask(answering('once')), { tenant });
    assert.equal((await check(f, 'npm publish --tag next', c('ci'))).allowed, false);
    assert.equal((await check(f, 'terraform destroy -auto-approve', c('ci'))).allowed, false);
    assert.equal((await check(f, 'npm publish --tag next', c('web'))).allowed, true);
    assert.equal((await check(f, 'terraform destroy -auto-approve', c('web'))).allowed, false);
  });

  it('checks an execute_code script as text: the whole script or any one line', async () => {
    const f = fixture({ approvals: { deny: ['*drop table*', 'rm -rf build'] } });
    const c = call(ask(answering('once')));
    const script = (code: string) => f.guard.check({ tool: 'execute_code', command: code, detect: false }, c);
    assert.equal(blocked(await script('import db\ndb.run("DROP TABLE users")\n')).error, DENY_TEXT('*drop table*'));
    assert.equal(blocked(await script('from hermes_tools import terminal\n  rm -rf build  \n')).error, DENY_TEXT('rm -rf build'));
    assert.deepEqual(await script('print("rm -rf build/x")'), { allowed: true });
  });
});

describe('approval guard: bypasses', () => {
  it('lets commands without a dangerous pattern through without asking', async () => {
    const asker = answering('deny');
    assert.deepEqual(await check(fixture(), 'ls -la && git status', call(ask(asker))), { allowed: true });
    assert.equal(asker.prompts.length, 0);
  });

  it('mode off runs dangerous commands without asking', async () => {
    const asker = answering('deny');
    assert.deepEqual(await check(fixture({ approvals: { mode: 'off' } }), DANGEROUS, call(ask(asker))), { allowed: true });
    assert.equal(asker.prompts.length, 0);
  });

  it('a yolo session runs without asking; other sessions and tenants still ask', async () => {
    const f = fixture();
    assert.equal(f.guard.setYolo('default', 'session:s1', true), true);
    assert.equal((await check(f, DANGEROUS, call(ask(answering('deny'))))).allowed, true);
    assert.equal((await check(f, DANGEROUS, call(ask(answering('deny')), { sessionId: 's2' }))).allowed, false);
    assert.equal((await check(f, DANGEROUS, call(ask(answering('deny')), { tenant: 'other' }))).allowed, false);
  });

  it('allow_yolo: false refuses yolo', () => {
    assert.equal(fixture({ approvals: { allow_yolo: false } }).guard.setYolo('default', 'session:s1', true), false);
  });

  it('skips approval on a backend without host filesystem access, per tenant policy', async () => {
    const asker = answering('deny');
    const noHost = call(ask(asker), { hostFilesystem: async () => false });
    assert.equal((await check(fixture(), DANGEROUS, noHost)).allowed, true);
    assert.equal((await check(fixture({ approvals: { skip_in_containers: false } }), DANGEROUS, noHost)).allowed, false);
    // Unknown capabilities never skip.
    const unknown = call(ask(answering('deny')), { hostFilesystem: async () => Promise.reject(new Error('down')) });
    assert.equal((await check(fixture(), DANGEROUS, unknown)).allowed, false);
  });

  it('a tenant override changes the mode for that tenant only', async () => {
    const f = fixture({
      allow_local_multi_tenant: true,
      tenants: [
        { id: 'ci', api_key_sha256: 'a'.repeat(64), approvals: { mode: 'off' } },
        { id: 'web', api_key_sha256: 'b'.repeat(64) },
      ],
    });
    assert.equal((await check(f, DANGEROUS, call(ask(answering('deny')), { tenant: 'ci' }))).allowed, true);
    assert.equal((await check(f, DANGEROUS, call(ask(answering('deny')), { tenant: 'web' }))).allowed, false);
  });
});

describe('approval guard: permanent allowlist', () => {
  const allowedBy = async (entries: string[], command: string) => {
    const asker = answering('deny');
    const verdict = await check(fixture({ command_allowlist: entries }), command, call(ask(asker)));
    return verdict.allowed;
  };

  it('approves by pattern key, exact text and glob', async () => {
    assert.equal(await allowedBy([KEY], DANGEROUS), true);
    assert.equal(await allowedBy([DANGEROUS], `  ${DANGEROUS} `), true);
    assert.equal(await allowedBy(['bash -c *'], "bash -c 'make test'"), true);
    assert.equal(await allowedBy(['bash -c ?echo*'], DANGEROUS), true);
    assert.equal(await allowedBy(['git push *'], DANGEROUS), false);
  });

  it('skips text and glob entries for commands with shell operators', async () => {
    for (const op of ['; ls', '&& ls', '|| ls', '| cat', '& ', '< in', '> out', '`id`', '$(id)']) {
      assert.equal(await allowedBy(['bash -c *'], `bash -c 'x' ${op}`), false, op);
    }
    assert.equal(await allowedBy(['bash -c *'], "bash -c 'x'\nrm -rf build"), false, 'newline');
  });

  it('needs every key of a command that matches several patterns', async () => {
    const both = "git push --force; bash -c 'x'";
    assert.equal(await allowedBy(['git force push (rewrites remote history)'], both), false);
    assert.equal(await allowedBy(['git force push (rewrites remote history)', KEY], both), true);
  });

  it("a tenant's own list adds to the operator's and does not reach other tenants", async () => {
    const f = fixture({
      allow_local_multi_tenant: true,
      command_allowlist: ['recursive delete'],
      tenants: [
        { id: 'a', api_key_sha256: 'a'.repeat(64), approvals: { command_allowlist: [KEY] } },
        { id: 'b', api_key_sha256: 'b'.repeat(64) },
      ],
    });
    assert.equal((await check(f, 'rm -rf build', call(ask(answering('deny')), { tenant: 'b' }))).allowed, true);
    assert.equal((await check(f, DANGEROUS, call(ask(answering('deny')), { tenant: 'a' }))).allowed, true);
    assert.equal((await check(f, DANGEROUS, call(ask(answering('deny')), { tenant: 'b' }))).allowed, false);
  });
});

describe('approval guard: non-interactive context', () => {
  it('auto-approves by default', async () => {
    assert.equal((await check(fixture(), DANGEROUS, call({ kind: 'none' }))).allowed, true);
  });

  it('blocks with approvals.non_interactive: deny', async () => {
    const result = blocked(await check(fixture({ approvals: { non_interactive: 'deny' } }), DANGEROUS, call({ kind: 'none' })));
    assert.equal(
      result.error,
      'BLOCKED: Command flagged as dangerous (shell command via -c/-lc flag) but this non-interactive context runs without a user present to approve it. Find an alternative approach that avoids this command. To allow dangerous commands in non-interactive contexts, set approvals.non_interactive: approve in config.yaml.',
    );
  });

  it('still never runs hardline commands', async () => {
    assert.equal((await check(fixture(), 'rm -rf ~', call({ kind: 'none' }))).allowed, false);
  });
});

describe('approval guard: asking the user', () => {
  it('sends the command, key, description, all four choices and the timeout', async () => {
    const asker = answering('once');
    const verdict = await check(fixture({ approvals: { timeout: 42 } }), DANGEROUS, call(ask(asker)));
    assert.deepEqual(verdict, {
      allowed: true,
      note: 'Command required approval (shell command via -c/-lc flag) and was approved by the user.',
    });
    assert.deepEqual(asker.prompts[0], {
      approvalId: 'appr_1',
      command: DANGEROUS,
      description: KEY,
      patternKey: KEY,
      choices: ['once', 'session', 'always', 'deny'],
      timeoutSec: 42,
    });
  });

  it('once is not remembered; session is, for that session of that tenant only', async () => {
    const f = fixture();
    await check(f, DANGEROUS, call(ask(answering('once'))));
    assert.equal((await check(f, DANGEROUS, call(ask(answering('deny'))))).allowed, false);
    await check(f, DANGEROUS, call(ask(answering('session'))));
    const later = answering('deny');
    assert.equal((await check(f, DANGEROUS, call(ask(later)))).allowed, true);
    assert.equal(later.prompts.length, 0);
    assert.equal((await check(f, DANGEROUS, call(ask(answering('deny')), { sessionId: 's2' }))).allowed, false);
    assert.equal((await check(f, DANGEROUS, call(ask(answering('deny')), { tenant: 'evil' }))).allowed, false);
  });

  it('without a session id, session approvals are scoped to the task', async () => {
    const f = fixture();
    await check(f, DANGEROUS, call(ask(answering('session')), { sessionId: '' }));
    assert.equal((await check(f, DANGEROUS, call(ask(answering('deny')), { sessionId: '' }))).allowed, true);
    assert.equal((await check(f, DANGEROUS, call(ask(answering('deny')), { sessionId: '', taskId: 't2' }))).allowed, false);
  });

  it('always adds the key to the allowlist (memory and config) for the right tenant location', async () => {
    const f = fixture();
    const verdict = await check(f, DANGEROUS, call(ask(answering('always'))));
    assert.equal(verdict.allowed, true);
    assert.match((verdict as { note: string }).note, /added to command_allowlist in \/etc\/berth\/config\.yaml/);
    assert.deepEqual(f.persister.calls, [{ location: { kind: 'top-level' }, keys: [KEY] }]);
    // Another session of the tenant needs no prompt now.
    assert.equal((await check(f, DANGEROUS, call(ask(answering('deny')), { sessionId: 'other' }))).allowed, true);

    const mt = fixture({ allow_local_multi_tenant: true, tenants: [{ id: 'acme', api_key_sha256: 'a'.repeat(64) }] });
    await check(mt, DANGEROUS, call(ask(answering('always')), { tenant: 'acme' }));
    assert.deepEqual(mt.persister.calls, [{ location: { kind: 'tenant', tenant: 'acme' }, keys: [KEY] }]);
  });

  it('deny blocks with upstream\'s text and stop suffix', async () => {
    const result = blocked(await check(fixture(), DANGEROUS, call(ask(answering('deny')))));
    assert.equal(result.error, `BLOCKED: User denied this command.${STOP}`);
  });

  // Ignoring the 50 ms policy timeout would wait for the default 300 s and hit the test's own timeout.
  it('silence until the timeout denies with the spec text', { timeout: 30_000 }, async () => {
    const f = fixture();
    const c = call(ask(silent()));
    // 50 ms instead of the config's whole seconds.
    const base = new ApprovalPolicies(parseConfig({}));
    const fast = new ApprovalGuard({
      policies: {
        policyFor: (t) => ({ ...base.policyFor(t), timeoutMs: 50 }),
        allowlistFor: (t) => base.allowlistFor(t),
        denyFor: (t) => base.denyFor(t),
        locationFor: (t) => base.locationFor(t),
        addToAllowlist: (t, k) => base.addToAllowlist(t, k),
      },
      sessions: f.sessions,
      pending: f.pending,
      persister: f.persister,
    });
    const result = blocked(await fast.check({ tool: 'terminal', command: DANGEROUS }, c));
    assert.equal(result.error, `BLOCKED: Command timed out without user response.${STOP} Silence is not consent.`);
  });

  it('a closed stream denies', async () => {
    const result = blocked(await check(fixture(), DANGEROUS, call(ask(new FakeAsker(() => ({ kind: 'closed' }))))));
    assert.match(String(result.error), /^BLOCKED: .*session that could approve it has closed, so it was not run\. The user has NOT consented/);
  });

  it('cancellation while waiting rejects (nothing runs) instead of returning a verdict', async () => {
    const abort = new AbortController();
    const pending = check(fixture(), DANGEROUS, call(ask(silent()), { signal: abort.signal }));
    abort.abort(new Error('shutting down'));
    await assert.rejects(pending, /shutting down/);
  });
});

describe('approval guard: smart mode', () => {
  const smartConfig = { approvals: { mode: 'smart', smart: { base_url: 'http://x/v1', model: 'm' } } };

  it('APPROVE approves for the session without asking the user', async () => {
    const smart = new FakeSmart('approve');
    const f = fixture(smartConfig, { smart });
    const asker = answering('deny');
    const verdict = await check(f, DANGEROUS, call(ask(asker)));
    assert.equal(verdict.allowed, true);
    assert.match((verdict as { note: string }).note, /approved by smart approval/);
    await check(f, DANGEROUS, call(ask(asker)));
    assert.equal(smart.asked.length, 1, 'the second call is approved by the session, not the model');
    assert.equal(asker.prompts.length, 0);
  });

  it('DENY blocks with the spec message', async () => {
    const result = blocked(await check(fixture(smartConfig, { smart: new FakeSmart('deny') }), DANGEROUS, call(ask(answering('once')))));
    assert.equal(
      result.error,
      'BLOCKED by smart approval: shell command via -c/-lc flag. The command was assessed as genuinely dangerous. Do NOT retry.',
    );
  });

  it('three denials in a row trip the circuit breaker, which then also marks the user\'s refusals', async () => {
    const f = fixture(smartConfig, { smart: new FakeSmart('deny') });
    const deny = 'BLOCKED by smart approval: shell command via -c/-lc flag. The command was assessed as genuinely dangerous. Do NOT retry.';
    const breaker =
      ' CIRCUIT BREAKER: 3 consecutive commands were blocked by the security reviewer. STOP attempting variations of this operation. ' +
      'Report the blocked operation to the user and either ask them to run it manually or use /approve.';
    assert.equal(blocked(await check(f, DANGEROUS, call(ask(answering('once'))))).error, deny);
    assert.equal(blocked(await check(f, DANGEROUS, call(ask(answering('once'))))).error, deny);
    assert.equal(blocked(await check(f, DANGEROUS, call(ask(answering('once'))))).error, deny + breaker);
    // Another session has its own count.
    assert.equal(blocked(await check(f, DANGEROUS, call(ask(answering('once')), { sessionId: 's2' }))).error, deny);
  });

  it('approvals.denial_breaker_threshold moves the breaker, per tenant too', async () => {
    const f = fixture(
      {
        ...smartConfig,
        allow_local_multi_tenant: true,
        approvals: { ...smartConfig.approvals, denial_breaker_threshold: 1 },
        tenants: [{ id: 'patient', api_key_sha256: 'c'.repeat(64), approvals: { denial_breaker_threshold: 2 } }],
      },
      { smart: new FakeSmart('deny') },
    );
    assert.match(String(blocked(await check(f, DANGEROUS, call(ask(answering('once'))))).error), / CIRCUIT BREAKER: 1 consecutive commands were blocked/);
    const patient = (n: number) => check(f, DANGEROUS, call(ask(answering('once')), { tenant: 'patient', sessionId: `p${n}` }));
    assert.doesNotMatch(String(blocked(await patient(1)).error), /CIRCUIT BREAKER/);
    assert.match(String(blocked(await patient(1)).error), / CIRCUIT BREAKER: 2 consecutive/);
  });

  it('a smart approval ends the streak', async () => {
    const smart = new FakeSmart('deny');
    const f = fixture(smartConfig, { smart });
    for (let i = 0; i < 3; i++) await check(f, DANGEROUS, call(ask(answering('once'))));
    smart.verdict = 'approve';
    assert.equal((await check(f, DANGEROUS, call(ask(answering('once'))))).allowed, true);
    smart.verdict = 'deny';
    assert.doesNotMatch(String(blocked(await check(f, 'sudo -a ls', call(ask(answering('once'))))).error), /CIRCUIT BREAKER/);
  });

  it('after the breaker trips, a user\'s deny carries it too', async () => {
    const smart = new FakeSmart('deny');
    const f = fixture(smartConfig, { smart });
    for (let i = 0; i < 3; i++) await check(f, DANGEROUS, call(ask(answering('once'))));
    smart.verdict = 'escalate';
    const result = blocked(await check(f, DANGEROUS, call(ask(answering('deny')))));
    assert.match(String(result.error), /^BLOCKED: User denied this command\. The user has NOT consented.* CIRCUIT BREAKER: 3 consecutive/);
  });

  it('anything else escalates to the user', async () => {
    const asker = answering('once');
    assert.equal((await check(fixture(smartConfig, { smart: new FakeSmart('escalate') }), DANGEROUS, call(ask(asker)))).allowed, true);
    assert.equal(asker.prompts.length, 1);
  });

  it('is not consulted in manual mode', async () => {
    const smart = new FakeSmart('approve');
    await check(fixture({}, { smart }), DANGEROUS, call(ask(answering('once'))));
    assert.equal(smart.asked.length, 0);
  });
});

describe('approval guard: deferred (unary) calls and Approve', () => {
  it('returns the spec pending result plus an approval id', async () => {
    const result = blocked(await check(fixture(), DANGEROUS, call({ kind: 'defer' })));
    assert.deepEqual(result, {
      output: '',
      exit_code: -1,
      error: '',
      status: 'pending_approval',
      approval_pending: true,
      command: DANGEROUS,
      description: KEY,
      pattern_key: KEY,
      approval_id: 'appr_1',
      message:
        `⚠️ ${KEY}. Asking the user for approval.\n\n**Command:**\n\`\`\`\n${DANGEROUS}\n\`\`\`\n\n` +
        'STOP: do NOT re-run, rephrase, or re-issue this command — each variant sends the user ANOTHER approval card. ' +
        "Wait for the user's decision; if this turn must end, report that approval is pending.",
    });
  });

  it('Approve once hands back the call with a grant that lets exactly that command through once', async () => {
    const f = fixture();
    await check(f, DANGEROUS, call({ kind: 'defer' }));
    const outcome = await f.guard.approve('default', { approvalId: 'appr_1', choice: 'once', taskId: 't1', sessionId: '' });
    assert.equal(outcome.kind, 'rerun');
    if (outcome.kind !== 'rerun') return;
    assert.equal(outcome.call.name, 'terminal');
    const rerun = call({ kind: 'defer' }, { grant: outcome.grant });
    assert.equal((await check(f, DANGEROUS, rerun)).allowed, true);
    assert.equal((await check(f, DANGEROUS, rerun)).allowed, false, 'a grant is used once');
    assert.equal((await check(f, `${DANGEROUS} && rm -rf build`, call({ kind: 'defer' }, { grant: { ...outcome.grant, used: false } }))).allowed, false);
  });

  it('Approve deny returns the denial; the id is then gone', async () => {
    const f = fixture();
    await check(f, DANGEROUS, call({ kind: 'defer' }));
    const outcome = await f.guard.approve('default', { approvalId: 'appr_1', choice: 'deny', taskId: '', sessionId: '' });
    assert.equal(outcome.kind, 'result');
    assert.match(outcome.kind === 'result' ? outcome.result : '', /"error":"BLOCKED: User denied this command\. The user has NOT consented/);
    await assert.rejects(f.guard.approve('default', { approvalId: 'appr_1', choice: 'once', taskId: '', sessionId: '' }), isCode('NOT_FOUND'));
  });

  it('Approve session remembers the keys for the parked call\'s session', async () => {
    const f = fixture();
    await check(f, DANGEROUS, call({ kind: 'defer' }));
    await f.guard.approve('default', { approvalId: 'appr_1', choice: 'session', taskId: '', sessionId: '' });
    assert.equal((await check(f, DANGEROUS, call({ kind: 'defer' }))).allowed, true);
  });

  it('another tenant, another task or an unknown id cannot answer it', async () => {
    const f = fixture();
    await check(f, DANGEROUS, call({ kind: 'defer' }));
    await assert.rejects(f.guard.approve('other', { approvalId: 'appr_1', choice: 'once', taskId: '', sessionId: '' }), isCode('NOT_FOUND'));
    await assert.rejects(f.guard.approve('default', { approvalId: 'appr_1', choice: 'once', taskId: 'tX', sessionId: '' }), isCode('NOT_FOUND'));
    await assert.rejects(f.guard.approve('default', { approvalId: 'nope', choice: 'once', taskId: '', sessionId: '' }), isCode('NOT_FOUND'));
    // Still answerable by its owner after those attempts.
    assert.equal((await f.guard.approve('default', { approvalId: 'appr_1', choice: 'once', taskId: 't1', sessionId: 's1' })).kind, 'rerun');
  });

  it('an invalid choice is INVALID_ARGUMENT and keeps the call pending', async () => {
    const f = fixture();
    await check(f, DANGEROUS, call({ kind: 'defer' }));
    await assert.rejects(f.guard.approve('default', { approvalId: 'appr_1', choice: 'yes', taskId: '', sessionId: '' }), isCode('INVALID_ARGUMENT'));
    assert.equal(f.pending.count('default'), 1);
  });

  it('parked calls expire after the approval timeout', async () => {
    let now = 1_000;
    const f = fixture({ approvals: { timeout: 10 } }, { now: () => now });
    await check(f, DANGEROUS, call({ kind: 'defer' }));
    now += 10_001;
    await assert.rejects(f.guard.approve('default', { approvalId: 'appr_1', choice: 'once', taskId: '', sessionId: '' }), isCode('NOT_FOUND'));
  });

  it('at most max_pending per tenant; more are blocked, other tenants unaffected', async () => {
    const f = fixture({ approvals: { max_pending: 2 } });
    assert.equal(blocked(await check(f, DANGEROUS, call({ kind: 'defer' }))).status, 'pending_approval');
    assert.equal(blocked(await check(f, DANGEROUS, call({ kind: 'defer' }))).status, 'pending_approval');
    const third = blocked(await check(f, DANGEROUS, call({ kind: 'defer' })));
    assert.equal(third.status, 'blocked');
    assert.match(String(third.error), /^BLOCKED: 2 commands are already waiting for approval/);
    assert.equal(blocked(await check(f, DANGEROUS, call({ kind: 'defer' }, { tenant: 'other' }))).status, 'pending_approval');
  });

  it('execute_code can ask under its own key without detection', async () => {
    const f = fixture();
    const verdict = await f.guard.check(
      { tool: 'execute_code', command: 'print(1)', patternKey: 'execute_code', description: 'run a Python script', detect: false },
      call({ kind: 'defer' }),
    );
    const result = blocked(verdict);
    assert.equal(result.pattern_key, 'execute_code');
    assert.equal(result.description, 'run a Python script');
    // and the allowlist can hold that key
    const allowed = fixture({ command_allowlist: ['execute_code'] });
    assert.equal(
      (await allowed.guard.check({ tool: 'execute_code', command: 'print(1)', patternKey: 'execute_code', detect: false }, call({ kind: 'defer' }))).allowed,
      true,
    );
  });
});

describe('stream approvals (Session)', () => {
  it('routes answers by approval id: two waiting calls answered in reverse order', async () => {
    const sent: Array<{ callId: string; prompt: ApprovalPrompt }> = [];
    const stream = new StreamApprovals((callId, prompt) => sent.push({ callId, prompt }));
    const f = fixture();
    const first = check(f, DANGEROUS, call(ask(stream.askerFor('c1'))));
    const second = check(f, 'rm -rf build', call(ask(stream.askerFor('c2'))));
    await waitUntil(() => sent.length === 2);
    assert.deepEqual(sent.map((s) => s.callId), ['c1', 'c2']);
    assert.equal(stream.answer(sent[1]!.prompt.approvalId, 'deny'), 'answered');
    assert.equal(stream.answer(sent[0]!.prompt.approvalId, 'once'), 'answered');
    assert.equal((await first).allowed, true);
    assert.equal((await second).allowed, false);
    assert.equal(stream.answer(sent[0]!.prompt.approvalId, 'once'), 'unknown', 'a late answer is reported, not applied');
  });

  it('close denies every waiting ask and every later one', async () => {
    const stream = new StreamApprovals(() => undefined);
    const f = fixture();
    const waiting = [check(f, DANGEROUS, call(ask(stream.askerFor('a')))), check(f, DANGEROUS, call(ask(stream.askerFor('b'))))];
    await waitUntil(() => stream.waiting === 2);
    stream.close();
    for (const v of await Promise.all(waiting)) assert.match(String(blocked(v).error), /has closed/);
    assert.match(String(blocked(await check(f, DANGEROUS, call(ask(stream.askerFor('c'))))).error), /has closed/);
  });

  it('an unreadable choice denies', async () => {
    const sent: ApprovalPrompt[] = [];
    const stream = new StreamApprovals((_c, p) => sent.push(p));
    const v = check(fixture(), DANGEROUS, call(ask(stream.askerFor('a'))));
    await waitUntil(() => sent.length === 1);
    assert.equal(stream.answer(sent[0]!.approvalId, 'YES PLEASE'), 'invalid-choice');
    assert.equal((await v).allowed, false);
  });
});

function isCode(code: string) {
  return (err: unknown) => err instanceof BerthError && err.code === code;
}

describe('approval guard: decisions reported for metrics', () => {
  it('reports each decision once, with a bounded reason, and nothing for commands that need no approval', async () => {
    const decisions: string[] = [];
    const f = fixture({}, { onDecision: (decision, reason) => decisions.push(`${decision}/${reason}`) });
    await check(f, 'ls -la', call(ask(answering('deny'))));
    await check(f, 'rm -rf /', call(ask(answering('once'))));
    await check(f, DANGEROUS, call(ask(answering('once'))));
    await check(f, DANGEROUS, call(ask(answering('deny'))));
    await check(f, DANGEROUS, call({ kind: 'none' }));
    const approvalId = String(blocked(await check(f, DANGEROUS, call({ kind: 'defer' }))).approval_id);
    const outcome = await f.guard.approve('default', { approvalId, choice: 'once', taskId: 't1', sessionId: '' });
    assert.equal(outcome.kind, 'rerun');
    if (outcome.kind !== 'rerun') return;
    // The re-run the answer allows was counted with the answer.
    assert.equal((await check(f, DANGEROUS, call({ kind: 'defer' }, { grant: outcome.grant }))).allowed, true);
    assert.deepEqual(decisions, [
      'blocked/hardline',
      'approved/user_once',
      'blocked/user_deny',
      'approved/non_interactive',
      'pending/approve_rpc',
      'approved/user_once',
    ]);
    const off = fixture({ approvals: { mode: 'off' } }, { onDecision: (decision, reason) => decisions.push(`${decision}/${reason}`) });
    await check(off, DANGEROUS, call({ kind: 'defer' }));
    assert.equal(decisions.at(-1), 'bypassed/mode_off');
  });
});

async function waitUntil(predicate: () => boolean): Promise<void> {
  for (let i = 0; i < 200 && !predicate(); i++) await new Promise((r) => setTimeout(r, 5));
  assert.ok(predicate(), 'condition not reached');
}
