/**
 * What the docker backend tells `berth doctor` about its throwaway task: how
 * commands reach the container, whether `docker.network: isolated` and
 * `terminal.container_disk` hold; after release, it removes the task's
 * persistent volumes (kept by design for a task's return).
 */
import type Dockerode from 'dockerode';
import type { DiagnosisPhase, DiagnosticFinding, TaskKey } from '../../backend.js';
import { checkpointFinding, runCriuCheck, type CriuCheck } from './checkpoint-check.js';
import type { DiskLimitPart, DiskLimitState } from './disk-limits.js';
import type { DiskUsage } from './disk-meter.js';
import type { DockerEnvironment } from './docker-environment.js';
import type { MemoryBudget } from './memory-admission.js';
import { MEMORY_OVERCOMMIT_SETTING } from './memory-admission.js';
import type { NetworkIsolation } from './network-isolation.js';

/** What of the backend the diagnosis looks at. */
export interface DockerDiagnosable {
  readonly docker: Dockerode;
  readonly diskLimits: Readonly<Record<DiskLimitPart, DiskLimitState>>;
  readonly networkIsolation: NetworkIsolation | undefined;
  /** docker.runtime ('' for the daemon's default). */
  readonly runtime: string;
  environmentOf(key: TaskKey): DockerEnvironment | undefined;
  removeTaskVolumes(key: TaskKey): Promise<void>;
  memoryBudget(): Promise<MemoryBudget | undefined>;
  diskUsage(key: TaskKey): Promise<DiskUsage | undefined>;
}

export async function diagnoseDocker(
  backend: DockerDiagnosable,
  key: TaskKey,
  phase: DiagnosisPhase,
  criuCheck: () => Promise<CriuCheck> = () => runCriuCheck(),
): Promise<DiagnosticFinding[]> {
  if (phase === 'released') {
    return backend.removeTaskVolumes(key).then(
      () => [],
      (err: unknown) => [
        {
          verdict: 'warn',
          text: `removing the doctor's task volumes failed: ${message(err)}; remove volumes labelled berth.tenant=${key.tenant}`,
        },
      ],
    );
  }
  const findings: DiagnosticFinding[] = [];
  const kind = backend.environmentOf(key)?.container.channel.kind;
  if (kind === 'agent') findings.push({ verdict: 'ok', text: 'commands reach the container through the exec agent' });
  else if (kind === 'docker-exec') {
    findings.push({ verdict: 'warn', text: 'the image cannot run the exec agent (no python3?): commands use docker exec, ~45 ms each' });
  }
  findings.push(...(await networkFindings(backend, key)));
  const disk = backend.diskLimits;
  if (disk.layer === 'enforced') findings.push({ verdict: 'ok', text: "terminal.container_disk is enforced on the container's writable layer" });
  if (disk.volumes === 'enforced') findings.push({ verdict: 'ok', text: 'terminal.container_disk is enforced on the persistent volumes' });
  if (disk.layer === 'off') findings.push({ verdict: 'ok', text: 'terminal.container_disk is not asked for (docker.disk_limit: off)' });
  // 'unsupported' was logged by the backend with the daemon's reason: Berth measures that part instead.
  const measured = (['layer', 'volumes'] as const).filter((p) => disk[p] === 'unsupported');
  if (measured.length > 0) findings.push(await measuredDiskFinding(backend, key, measured));
  findings.push(await memoryFinding(backend));
  findings.push(checkpointFinding(backend.runtime, backend.runtime === 'runsc' ? undefined : await criuCheck()));
  return findings;
}

/** docker.network: the task container's network, and under isolated whether every rule is in place. */
async function networkFindings(backend: DockerDiagnosable, key: TaskKey): Promise<DiagnosticFinding[]> {
  const id = backend.environmentOf(key)?.container.id;
  const mode = id ? (await backend.docker.getContainer(id).inspect()).HostConfig.NetworkMode : undefined;
  const isolation = backend.networkIsolation;
  if (!isolation) {
    if (mode === 'bridge') {
      return [
        {
          verdict: 'warn',
          text:
            'docker.network: bridge: task containers can reach each other, the Docker host and private and link-local ' +
            'ranges; set docker.network: isolated (the default) where tenants share this host',
        },
      ];
    }
    return mode === 'none' ? [{ verdict: 'ok', text: 'docker.network: none: task containers have no network' }] : [];
  }
  const checks = await isolation.verify();
  const missing = checks.filter((c) => !c.ok);
  if (missing.length > 0) {
    return missing.map((c) => ({
      verdict: 'fail',
      text: `docker.network: isolated: the rule "${c.text}" is missing; restart the executor to put it back, and look for what removes it (a firewall reload?)`,
    }));
  }
  const tools = isolation.families.includes(6) ? 'iptables and ip6tables' : 'iptables';
  return [
    { verdict: 'ok', text: `docker.network: isolated is enforced: ${checks.length} ${tools} rules in place, the task's container is on ${mode}` },
  ];
}

/** terminal.container_disk where Docker cannot enforce it: Berth measures the task and refuses its calls past the limit. */
async function measuredDiskFinding(backend: DockerDiagnosable, key: TaskKey, parts: readonly DiskLimitPart[]): Promise<DiagnosticFinding> {
  const what = parts.map((p) => (p === 'layer' ? "the writable layer" : 'the persistent volumes')).join(' and ');
  const usage = await backend.diskUsage(key).then(
    (u) => u,
    (err: unknown) => message(err),
  );
  if (typeof usage === 'string' || usage === undefined) {
    return {
      verdict: 'warn',
      text: `terminal.container_disk cannot be enforced by Docker on ${what}, and Berth could not measure them: ${usage ?? 'no measure'}`,
    };
  }
  return {
    verdict: 'ok',
    text:
      `terminal.container_disk is measured by Berth on ${what} (Docker cannot enforce it on this storage): ` +
      `a task past it is refused its commands and file writes; this task uses ${Math.round(usage.totalBytes / 1024 / 1024)} MiB`,
  };
}

/** docker.memory_overcommit: how much sandbox memory this executor admits, and how much it holds. */
async function memoryFinding(backend: DockerDiagnosable): Promise<DiagnosticFinding> {
  const budget = await backend.memoryBudget().catch(() => undefined);
  if (!budget) {
    return {
      verdict: 'warn',
      text: `${MEMORY_OVERCOMMIT_SETTING}: sandbox memory is not bounded by the host's (the setting is 0, or the Docker host's memory is unknown); tenants together may take all of it`,
    };
  }
  return {
    verdict: 'ok',
    text:
      `${MEMORY_OVERCOMMIT_SETTING}: this executor admits up to ${budget.limitMiB} MiB of sandbox memory limits ` +
      `(${budget.hostMiB} MiB × ${budget.factor}), counting ` +
      (budget.engineWide ? 'every Berth sandbox on the engine (docker.memory_scope: engine)' : "this executor's sandboxes (docker.memory_scope: executor)") +
      `; ${budget.heldMiB} MiB held now ` +
      `(this executor's: ${budget.ownMiB} MiB)`,
  };
}

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
