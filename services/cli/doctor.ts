/**
 * `berth doctor`: does the configured backend work on this host? It starts
 * the backend as an executor would, runs a command in a throwaway task,
 * releases it, and prints one line per finding: `ok`, `warn` (works, but
 * weaker or slower than it could be; the backend's own start-up warnings
 * land here) or `fail` (with the backend's message, which says what to do).
 * No server is needed and nothing is left behind.
 */
import { randomBytes } from 'node:crypto';
import { Writable } from 'node:stream';
import type { BerthConfig } from '../common/config.js';
import { createLogger } from '../common/logging.js';
import type { Backend, TaskKey } from '../executor/backend.js';
import { createBackend } from '../executor/backends/create-backend.js';
import type { DaytonaBackend } from '../executor/backends/daytona/daytona-backend.js';
import type { DockerBackend } from '../executor/backends/docker/docker-backend.js';
import type { SingularityBackend } from '../executor/backends/singularity/singularity-backend.js';
import type { SshBackend } from '../executor/backends/ssh/ssh-backend.js';
import type { ModalBackend } from '../executor/backends/modal/modal-backend.js';
import { TaskEnvironments } from '../executor/task-environment.js';

export const DOCTOR_HELP = `  berth doctor [--config FILE] [--backend NAME]
      Check that the configured backend works here: start it, run a command
      in a throwaway task (twice: a new task, then a warm one), release it.
      One line per finding: ok, warn (works, but weaker or slower than it
      could be), fail (with what to do). Exit 0 when nothing failed, else 1.`;

export type Verdict = 'ok' | 'warn' | 'fail';

export interface Finding {
  readonly verdict: Verdict;
  readonly text: string;
}

/** Runs the checks; `report` gets each finding as it is made. */
export async function runDoctor(config: BerthConfig, report: (finding: Finding) => void): Promise<Finding[]> {
  const findings: Finding[] = [];
  const say = (verdict: Verdict, text: string) => {
    const finding = { verdict, text };
    findings.push(finding);
    report(finding);
  };
  // The backend's warnings (a limit it cannot apply, a flag that weakens the sandbox, ...) are findings too.
  const warnings: string[] = [];
  const logger = createLogger(
    'warn',
    new Writable({
      write(chunk: Buffer, _encoding, callback) {
        try {
          const record = JSON.parse(chunk.toString()) as { level?: number; msg?: string; err?: unknown };
          if ((record.level ?? 0) >= 40 && record.msg) {
            const detail = typeof record.err === 'string' ? `: ${record.err}` : '';
            warnings.push(`${record.msg}${detail}`);
          }
        } catch {
          // not a log record
        }
        callback();
      },
    }),
  );
  const name = config.terminal.backend;
  let backend: Backend;
  try {
    backend = await createBackend(config, logger);
  } catch (err) {
    say('fail', `the ${name} backend does not start: ${message(err)}`);
    return findings;
  }
  say('ok', `the ${name} backend starts`);
  const envs = new TaskEnvironments({ backend, logger, lifetimeSeconds: 0 });
  const key: TaskKey = { tenant: 'berth-doctor', taskId: `doctor-${randomBytes(4).toString('hex')}` };
  try {
    let started = performance.now();
    const first = await envs.exec(key, { command: 'echo "berth-doctor-$((6 * 7))"; id -u', timeoutMs: 120_000 });
    const firstMs = performance.now() - started;
    const [marker, uid] = first.output.trim().split('\n');
    if (first.exitCode !== 0 || marker !== 'berth-doctor-42') {
      say('fail', `a command in a new task did not run as expected (exit ${first.exitCode}): ${first.output.trim().slice(0, 500)}`);
      return findings;
    }
    say('ok', `a new task runs a command (${firstMs.toFixed(0)} ms, as uid ${uid})`);
    started = performance.now();
    const warm = await envs.exec(key, { command: 'true', timeoutMs: 60_000 });
    const warmMs = performance.now() - started;
    say(warm.exitCode === 0 ? 'ok' : 'fail', `the same task runs the next command (${warmMs.toFixed(1)} ms, exit ${warm.exitCode})`);
    await backendFindings(backend, key, say);
    await daytonaFindings(config, backend, say);
  } catch (err) {
    say('fail', `a command in a new task failed: ${message(err)}`);
  } finally {
    await envs.closeAll().catch((err: unknown) => say('warn', `releasing the doctor's task failed: ${message(err)}`));
    await (await asDocker(backend))?.removeTaskVolumes(key).catch((err: unknown) =>
      say('warn', `removing the doctor's task volumes failed: ${message(err)}; remove volumes labelled berth.tenant=${key.tenant}`),
    );
    await (await asDaytona(backend))?.removeTaskSandbox(key).catch((err: unknown) =>
      say('warn', `deleting the doctor's Daytona sandbox failed: ${message(err)}; delete sandboxes labelled berth.tenant=${key.tenant}`),
    );
    const modal = await asModal(backend);
    if (modal) {
      await modal.sandboxRunning(key).then(
        (running) =>
          running
            ? say('fail', "the doctor's Modal sandbox still runs after its release; terminate it in Modal's dashboard (app berth)")
            : say('ok', 'release terminated the Modal sandbox'),
        (err: unknown) => say('warn', `could not check that the doctor's Modal sandbox was terminated: ${message(err)}`),
      );
    }
    await backend.close().catch(() => undefined);
    for (const text of new Set(warnings)) say('warn', text);
  }
  return findings;
}

/** The backend as a DockerBackend, when it is one (loaded only then). */
async function asDocker(backend: Backend): Promise<DockerBackend | undefined> {
  if (backend.capabilities.name !== 'docker') return undefined;
  const { DockerBackend } = await import('../executor/backends/docker/docker-backend.js');
  return backend instanceof DockerBackend ? backend : undefined;
}

/** The backend as a SingularityBackend, when it is one (loaded only then). */
async function asSingularity(backend: Backend): Promise<SingularityBackend | undefined> {
  if (backend.capabilities.name !== 'singularity') return undefined;
  const { SingularityBackend } = await import('../executor/backends/singularity/singularity-backend.js');
  return backend instanceof SingularityBackend ? backend : undefined;
}

/** The backend as an SshBackend, when it is one (loaded only then). */
async function asSsh(backend: Backend): Promise<SshBackend | undefined> {
  if (backend.capabilities.name !== 'ssh') return undefined;
  const { SshBackend } = await import('../executor/backends/ssh/ssh-backend.js');
  return backend instanceof SshBackend ? backend : undefined;
}

/** ssh: whether commands reach the host through the exec agent, or one channel each (no usable python3 there). */
export function sshAgentFinding(usesAgent: boolean | undefined, whyNot: string | undefined): Finding | undefined {
  if (usesAgent === undefined) return undefined;
  if (usesAgent) return { verdict: 'ok', text: 'commands reach the ssh host through the exec agent (one channel per task)' };
  return {
    verdict: 'warn',
    text:
      'the ssh host cannot run the exec agent' +
      (whyNot ? ` (${whyNot})` : '') +
      ': commands open one ssh channel each (slower), and execute_code runs in a per-task code container; ' +
      'install python3 (3.8 or newer) on the host',
  };
}

/** The backend as a DaytonaBackend, when it is one (loaded only then). */
async function asDaytona(backend: Backend): Promise<DaytonaBackend | undefined> {
  if (backend.capabilities.name !== 'daytona') return undefined;
  const { DaytonaBackend } = await import('../executor/backends/daytona/daytona-backend.js');
  return backend instanceof DaytonaBackend ? backend : undefined;
}

/** The backend as a ModalBackend, when it is one (its module loads no SDK by itself). */
async function asModal(backend: Backend): Promise<ModalBackend | undefined> {
  if (backend.capabilities.name !== 'modal') return undefined;
  const { ModalBackend } = await import('../executor/backends/modal/modal-backend.js');
  return backend instanceof ModalBackend ? backend : undefined;
}

/**
 * What only one backend can tell: for docker, how commands reach the
 * container and whether the disk limit holds; for ssh, singularity and modal,
 * how commands reach the host, the instance or the sandbox.
 */
async function backendFindings(backend: Backend, key: TaskKey, say: (verdict: Verdict, text: string) => void): Promise<void> {
  const modal = await asModal(backend);
  if (modal) {
    say('ok', "commands reach the Modal sandbox through the exec agent, on one exec of Modal's SDK; execute_code runs in the sandbox");
    const network = modal.networkFinding(key.tenant);
    // A policy that cannot apply was logged at start-up too: it arrives as that warning.
    if (network.verdict === 'ok') say('ok', network.text);
    return;
  }
  const ssh = await asSsh(backend);
  if (ssh) {
    const finding = sshAgentFinding(ssh.environmentOf(key)?.usesAgent, ssh.agentUnusable);
    if (finding) say(finding.verdict, finding.text);
    return;
  }
  const singularity = await asSingularity(backend);
  if (singularity) {
    const transport = singularity.transportOf(key);
    if (transport === 'agent') {
      say('ok', 'commands reach the instance through the exec agent (one apptainer exec per task); execute_code runs in the instance');
    } else if (transport === 'apptainer-exec') {
      say(
        'warn',
        'the image cannot run the exec agent (no python3?): each command starts its own apptainer exec (slower), ' +
          'and execute_code runs in a per-task code container',
      );
    }
    return;
  }
  const docker = await asDocker(backend);
  if (!docker) return;
  const kind = docker.environmentOf(key)?.container.channel.kind;
  if (kind === 'agent') say('ok', 'commands reach the container through the exec agent');
  else if (kind === 'docker-exec') say('warn', 'the image cannot run the exec agent (no python3?): commands use docker exec, ~45 ms each');
  await networkFindings(docker, key, say);
  const disk = docker.diskLimits;
  if (disk.layer === 'enforced') say('ok', "terminal.container_disk is enforced on the container's writable layer");
  if (disk.volumes === 'enforced') say('ok', 'terminal.container_disk is enforced on the persistent volumes');
  if (disk.layer === 'off') say('ok', 'terminal.container_disk is not asked for (docker.disk_limit: off)');
  // 'unsupported' was logged by the backend with the daemon's reason: it arrives as a warning.
}

/** daytona: how commands reach the sandbox, and which part of the network policy Daytona applies. */
async function daytonaFindings(config: BerthConfig, backend: Backend, say: (verdict: Verdict, text: string) => void): Promise<void> {
  if (backend.capabilities.name !== 'daytona') return;
  say('ok', 'commands reach the Daytona sandbox through the exec agent, over one PTY session');
  const { tenantNetworkPlan } = await import('../executor/backends/daytona/create-daytona-backend.js');
  const tenants = config.tenants.length > 0 ? config.tenants.map((t) => t.id) : ['default'];
  for (const tenant of tenants) {
    const { network, unenforced } = tenantNetworkPlan(config, tenant);
    const who = config.tenants.length > 0 ? `tenant ${tenant}: ` : '';
    // An unenforced part was logged by the backend at start: it arrives as a warning.
    if (unenforced) continue;
    if (network.networkBlockAll) say('ok', `${who}network policy applied as Daytona's networkBlockAll (no egress)`);
    else if (network.networkAllowList) say('ok', `${who}network policy applied as Daytona's networkAllowList (${network.networkAllowList})`);
    else say('ok', `${who}network policy: egress open, Daytona's default network`);
  }
}

/** docker.network: the task container's network, and under isolated whether every rule is in place. */
async function networkFindings(docker: DockerBackend, key: TaskKey, say: (verdict: Verdict, text: string) => void): Promise<void> {
  const id = docker.environmentOf(key)?.container.id;
  const mode = id ? (await docker.docker.getContainer(id).inspect()).HostConfig.NetworkMode : undefined;
  const isolation = docker.networkIsolation;
  if (!isolation) {
    if (mode === 'bridge') {
      say('warn', 'docker.network: bridge: task containers can reach each other, the Docker host and private and link-local ' +
        'ranges; set docker.network: isolated (the default) where tenants share this host');
    } else if (mode === 'none') say('ok', 'docker.network: none: task containers have no network');
    return;
  }
  const checks = await isolation.verify();
  const missing = checks.filter((c) => !c.ok);
  for (const c of missing) {
    say('fail', `docker.network: isolated: the rule "${c.text}" is missing; restart the executor to put it back, and look for what removes it (a firewall reload?)`);
  }
  if (missing.length === 0) {
    const tools = isolation.families.includes(6) ? 'iptables and ip6tables' : 'iptables';
    say('ok', `docker.network: isolated is enforced: ${checks.length} ${tools} rules in place, the task's container is on ${mode}`);
  }
}

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** `ok    text` lines, aligned. */
export function formatFinding(finding: Finding): string {
  return `${finding.verdict.padEnd(5)} ${finding.text}\n`;
}
