/**
 * Tenant B names tenant A's ids: A's task id in CallTool, Interrupt and
 * EndTask, A's background process (`session_id`) in every `process`
 * action, A's pending approval (`approval_id`) in Approve. Each attempt
 * must leave A's task, process and approval as they were (checked as A
 * afterwards), and B's answer must be the one B gets for an id that never
 * existed: byte for byte, once the id asked about is replaced by `<ID>` in
 * both (answers echo the id they were asked about, as the spec's error
 * strings do). Otherwise the answer would tell B that A's id exists.
 *
 * Runs on the docker backend, and on the local backend with
 * `allow_local_multi_tenant: true`: ids are namespaced by the dispatcher and
 * the executor whatever the backend. One server per backend for the file.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { rm } from 'node:fs/promises';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import Dockerode from 'dockerode';
import { LABEL } from '../../services/executor/backends/docker/container-spec.js';
import { dockerUnavailableReason, removeLabelled } from '../support/docker-fixtures.js';
import { answerOf, startTwoTenants, streamingTerminal, type TwoTenants } from '../support/two-tenants.js';

const docker = new Dockerode();
const dockerMissing = await dockerUnavailableReason(docker);

/** The answer with the id it was asked about (and the task id) replaced, for comparing two answers. */
function normalized(answer: string, ...ids: string[]): string {
  let text = answer;
  for (const id of ids) text = text.replaceAll(id, '<ID>');
  return text;
}

const hex = (bytes: number) => randomBytes(bytes).toString('hex');

for (const backend of ['local', 'docker'] as const) {
  describe(`tenant B names tenant A's ids (${backend} backend)`, { skip: backend === 'docker' ? dockerMissing : undefined }, () => {
    let t: TwoTenants;
    const run = hex(4);
    const taskIds: string[] = [];
    const taskId = (name: string) => {
      const id = `iso-${name}-${run}`;
      taskIds.push(id);
      return id;
    };
    /** A's task with state, a background process and a pending approval. */
    const main = taskId('main');
    /** A's task running a foreground command during the Interrupt attempt. */
    const busy = taskId('busy');
    const never = () => taskId(`never-${hex(4)}`);
    let aDir = '';
    let procId = '';
    let approvalId = '';

    const json = (text: string) => JSON.parse(text) as Record<string, unknown>;
    const aTerminal = async (command: string, task = main) => json(await t.call(t.a, 'terminal', { command }, task));

    /** A's own view of its task: its variable, its cwd, its file. */
    const assertATaskIntact = async () => {
      const r = await aTerminal('echo "$A_SECRET"; pwd; cat alpha-file.txt');
      assert.deepEqual(r, { output: `alpha-secret\n${aDir}\nalpha-file-content`, exit_code: 0, error: null });
    };
    /** A's background `cat` (on a PTY, so its stdin stays open) still runs and got nothing from B. */
    const assertAProcessIntact = async () => {
      const r = json(await t.call(t.a, 'process', { action: 'poll', session_id: procId }, main));
      assert.equal(r.status, 'running', JSON.stringify(r));
      assert.ok(!String(r.output_preview).includes('from-b'), JSON.stringify(r));
    };

    before(async () => {
      t = await startTwoTenants({
        backend,
        // On docker a command would otherwise need no approval (the container is the boundary).
        configLines: ['approvals: { skip_in_containers: false }'],
      });
      const setup = await aTerminal('cd "$(mktemp -d)" && export A_SECRET=alpha-secret && echo alpha-file-content > alpha-file.txt && pwd');
      assert.equal(setup.exit_code, 0, JSON.stringify(setup));
      aDir = String(setup.output);
      const started = json(await t.call(t.a, 'terminal', { command: 'cat', background: true, pty: true }, main));
      procId = String(started.session_id);
      assert.match(procId, /^proc_/);
      const pending = json(await t.call(t.a, 'terminal', { command: "bash -c 'echo approved-by-a'" }, main));
      assert.equal(pending.status, 'pending_approval', JSON.stringify(pending));
      approvalId = String(pending.approval_id);
    });

    after(async () => {
      if (t !== undefined) {
        await t.stop();
        // A local task's directory is on this host; `rm -rf` through the tool would wait for an approval nobody gives.
        if (backend === 'local' && aDir.startsWith('/tmp/')) await rm(aDir, { recursive: true, force: true });
      }
      if (backend === 'docker') for (const id of taskIds) await removeLabelled(docker, LABEL.task, id);
    });

    test("EndTask of A's task id: released nothing, same answer as an unknown task", async () => {
      const unknown = never();
      const named = await answerOf(() => t.b.endTask({ taskId: main }));
      const fresh = await answerOf(() => t.b.endTask({ taskId: unknown }));
      assert.equal(named, 'ok {"released":false}');
      assert.equal(normalized(named, main), normalized(fresh, unknown));
      await assertATaskIntact();
      await assertAProcessIntact();
    });

    test("Interrupt of A's task id while A's command runs: A's command finishes, same answer as an unknown task", async () => {
      const call = streamingTerminal(t.a, busy, 'echo started; sleep 3; echo finished');
      let finished = false;
      void call.result.finally(() => (finished = true)).catch(() => undefined);
      await call.started;
      const unknown = never();
      const named = await answerOf(() => t.b.interrupt({ taskId: busy }));
      assert.equal(finished, false, "A's command was still running when B interrupted");
      const fresh = await answerOf(() => t.b.interrupt({ taskId: unknown }));
      assert.equal(named, 'ok {"interrupted":0}');
      assert.equal(normalized(named, busy), normalized(fresh, unknown));
      assert.deepEqual(json(await call.result), { output: 'started\nfinished', exit_code: 0, error: null });
    });

    test("CallTool on A's task id runs in B's own environment: same answers as an unknown task, A untouched", async () => {
      const unknown = never();
      const probes: Array<[string, object]> = [
        ['terminal', { command: 'echo "[${A_SECRET-}] $PWD"; cat alpha-file.txt 2>&1; echo "jobs=$(jobs | wc -l)"' }],
        ['read_file', { path: 'alpha-file.txt' }],
        ['process', { action: 'list' }],
      ];
      for (const [tool, args] of probes) {
        const named = await t.call(t.b, tool, args, main);
        const fresh = await t.call(t.b, tool, args, unknown);
        assert.ok(!/alpha-secret|alpha-file-content/.test(named), `${tool}: ${named}`);
        assert.equal(normalized(named, main), normalized(fresh, unknown), tool);
      }
      // B's changes land in B's environment of that name, never in A's.
      const changed = json(await t.call(t.b, 'terminal', { command: 'export A_SECRET=from-b; cd /; rm -f alpha-file.txt; pwd' }, main));
      assert.equal(changed.output, '/');
      await assertATaskIntact();
      await assertAProcessIntact();
    });

    for (const action of ['poll', 'log', 'wait', 'write', 'submit', 'close', 'kill'] as const) {
      test(`process ${action} of A's session_id: same answer as an unknown id, A's process untouched`, async () => {
        const extra = action === 'write' || action === 'submit' ? { data: 'from-b\n' } : action === 'wait' ? { timeout: 1 } : {};
        const unknownProc = `proc_${hex(32).slice(0, procId.length - 'proc_'.length)}`;
        const unknownTask = never();
        // B names A's process under A's task id, and under a task of B's own.
        const namedInATask = await t.call(t.b, 'process', { action, session_id: procId, ...extra }, main);
        const fresh = await t.call(t.b, 'process', { action, session_id: unknownProc, ...extra }, unknownTask);
        assert.equal(normalized(namedInATask, procId, main), normalized(fresh, unknownProc, unknownTask));
        assert.equal(json(namedInATask).status, 'not_found', namedInATask);
        await assertAProcessIntact();
      });
    }

    test("A's process still answers A (the checks above could see a change)", async () => {
      const w = json(await t.call(t.a, 'process', { action: 'write', session_id: procId, data: 'from-a\n' }, main));
      assert.equal(w.status, 'ok', JSON.stringify(w));
      // The PTY echoes the line, then cat prints it: wait for both, and see only A's line, never B's.
      const both = (text: string) => text.split('\n').filter((line) => line === 'from-a').length >= 2;
      let log = '';
      for (let i = 0; i < 100 && !both(log); i++) {
        log = String(json(await t.call(t.a, 'process', { action: 'log', session_id: procId }, main)).output);
        if (!both(log)) await sleep(100);
      }
      assert.deepEqual(log.split('\n'), ['from-a', 'from-a']);
    });

    for (const choice of ['once', 'deny'] as const) {
      test(`Approve (${choice}) of A's approval_id: same answer as an unknown id, A's call still pending`, async () => {
        const unknown = `appr_${hex(12)}`;
        const unknownTask = never();
        const named = await answerOf(() => t.b.approve({ approvalId, choice, taskId: '', sessionId: '' }));
        const fresh = await answerOf(() => t.b.approve({ approvalId: unknown, choice, taskId: '', sessionId: '' }));
        assert.match(named, /^error 5 /); // NOT_FOUND
        assert.equal(normalized(named, approvalId), normalized(fresh, unknown));
        const namedWithTask = await answerOf(() => t.b.approve({ approvalId, choice, taskId: main, sessionId: '' }));
        const freshWithTask = await answerOf(() => t.b.approve({ approvalId: unknown, choice, taskId: unknownTask, sessionId: '' }));
        assert.equal(normalized(namedWithTask, approvalId, main), normalized(freshWithTask, unknown, unknownTask));
      });
    }

    test("A's approval is still pending for A: approving it runs A's command", async () => {
      const r = json((await t.a.approve({ approvalId, choice: 'once', taskId: '', sessionId: '' })).resultJson);
      assert.equal(r.output, 'approved-by-a', JSON.stringify(r));
      await assertATaskIntact();
    });
  });
}
