/**
 * How the ssh backend puts the exec agent on a host: a content-addressed
 * name, a copy that appears whole or not at all (run here through `sh`, as
 * sshd's login shell would), the start command, the preflight's "is it
 * there" line, and what `berth doctor` says either way.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { agentScriptFrom, findAgentScript, loadAgentScript } from '../../services/executor/backends/shared/agent/agent-script.js';
import {
  buildAgentCopyCommand,
  buildAgentStartCommand,
  remoteAgentPath,
  sshAgentFinding,
} from '../../services/executor/backends/ssh/ssh-agent.js';
import { buildPreflightCommand, RELAY_SOCKET_SUFFIX_BYTES } from '../../services/executor/backends/ssh/ssh-scripts.js';

const sh = (command: string, stdin: string | Buffer = '', env: NodeJS.ProcessEnv = process.env) =>
  spawnSync('sh', ['-c', command], { input: stdin, encoding: 'utf8', timeout: 10_000, env });

describe('the exec agent on an ssh host', () => {
  const home = mkdtempSync(path.join(os.tmpdir(), 'berth-agent-copy-'));
  after(() => rmSync(home, { recursive: true, force: true }));

  it('names a copy by the first 16 hex digits of its SHA-256', async () => {
    const content = Buffer.from('print("agent")\n');
    const script = agentScriptFrom(content);
    const hash = createHash('sha256').update(content).digest('hex').slice(0, 16);
    assert.equal(script.fileName, `agent-${hash}.pyz`);
    assert.equal(remoteAgentPath('/home/u', script), `/home/u/.berth/agent-${hash}.pyz`);
    const shipped = await loadAgentScript();
    assert.ok(shipped.content.equals(readFileSync(findAgentScript())));
    assert.notEqual(agentScriptFrom(Buffer.concat([shipped.content, Buffer.from('\n')])).fileName, shipped.fileName);
  });

  it('copies from stdin to its name through a temp file, private, and leaves nothing else', () => {
    const script = agentScriptFrom(Buffer.from('print("v1")\n'));
    const r = sh(buildAgentCopyCommand(home, script), script.content);
    assert.equal(r.status, 0, r.stderr);
    const target = remoteAgentPath(home, script);
    assert.equal(readFileSync(target, 'utf8'), 'print("v1")\n');
    assert.equal(statSync(target).mode & 0o777, 0o600);
    assert.equal(statSync(path.dirname(target)).mode & 0o777, 0o700);
    // Another version lands beside it; the first is untouched.
    const v2 = agentScriptFrom(Buffer.from('print("v2")\n'));
    assert.equal(sh(buildAgentCopyCommand(home, v2), v2.content).status, 0);
    assert.deepEqual(readdirSync(path.dirname(target)).sort(), [script.fileName, v2.fileName].sort());
    assert.equal(readFileSync(target, 'utf8'), 'print("v1")\n');
  });

  it('starts the agent by exec, every argument quoted', () => {
    assert.equal(buildAgentStartCommand(['python3', "/home/o'k/.berth/agent-1.py", '--stdio']), "exec 'python3' '/home/o'\\''k/.berth/agent-1.py' '--stdio'");
  });

  it('the preflight says whether the copy is there', () => {
    const script = agentScriptFrom(Buffer.from('print("v1")\n'));
    const rel = path.posix.join('.berth', script.fileName);
    const env = { ...process.env, HOME: home };
    assert.match(sh(buildPreflightCommand('.berth/tasks', 'abc', rel), '', env).stdout, /^berth-agent:yes$/m);
    assert.match(sh(buildPreflightCommand('.berth/tasks', 'abc', '.berth/agent-0000.py'), '', env).stdout, /^berth-agent:no$/m);
    assert.doesNotMatch(sh(buildPreflightCommand('.berth/tasks', 'abc'), '', env).stdout, /berth-agent:/);
  });

  it("the preflight gives execute_code's socket a short private base under /tmp when the task directory is too long", () => {
    const env = { ...process.env, HOME: home };
    // Short whatever the temp directory's depth (test/run.sh gives each run its own).
    const short = sh(buildPreflightCommand('.b', 'a'.repeat(8), undefined, true), '', env);
    assert.equal(short.status, 0, short.stderr);
    assert.doesNotMatch(short.stdout, /berth-rpc:/);
    const long = sh(buildPreflightCommand(`.berth/${'t'.repeat(40)}`, 'a'.repeat(32), undefined, true), '', env);
    assert.equal(long.status, 0, long.stderr);
    const base = /^berth-rpc:(.*)$/m.exec(long.stdout)?.[1] ?? '';
    try {
      assert.match(base, /^\/tmp\/berth-rpc-[A-Za-z0-9]{8}$/);
      assert.ok(statSync(base).isDirectory());
      assert.equal(statSync(base).mode & 0o777, 0o700);
      assert.ok(base.length + RELAY_SOCKET_SUFFIX_BYTES <= 107);
    } finally {
      if (base) rmSync(base, { recursive: true, force: true });
    }
  });

  it('berth doctor: ok through the agent, a warning naming python3 without it', () => {
    assert.deepEqual(sshAgentFinding(true, undefined), {
      verdict: 'ok',
      text: 'commands reach the ssh host through the exec agent (one channel per task)',
    });
    const warning = sshAgentFinding(false, 'ssh host u@h:22 has no usable python3 to run the exec agent');
    assert.equal(warning?.verdict, 'warn');
    assert.equal(
      warning?.text,
      'the ssh host cannot run the exec agent (ssh host u@h:22 has no usable python3 to run the exec agent): commands ' +
        'open one ssh channel each (slower), and execute_code runs in a per-task code container; install python3 ' +
        '(3.8 or newer) on the host',
    );
    assert.equal(sshAgentFinding(undefined, undefined), undefined);
  });
});
