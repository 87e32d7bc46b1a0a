/**
 * Runs the Kubernetes stand-in (a test double of a Kubernetes API server,
 * test/standins/kubernetes/) as `npm run standin -- kubernetes` does: a
 * separate process on a free port that writes a kubeconfig, stopped with
 * SIGTERM, which removes its containers, volumes and network. Clients reach
 * it only through that kubeconfig; {@link RunningKubernetesStandIn.kubectl}
 * runs this machine's kubectl with it.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import Dockerode from 'dockerode';
import { spawnStandin } from './standin-process.js';

export interface KubectlResult {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

export interface KubectlOptions {
  readonly input?: string;
  /** A context of the kubeconfig other than the current one. */
  readonly context?: string;
  /** Ends kubectl (SIGTERM) after this long, for watches. */
  readonly stopAfterMs?: number;
}

export interface RunningKubernetesStandIn {
  readonly port: number;
  readonly kubeconfig: string;
  /** `key=value`: the label on every container, volume and network it makes. */
  readonly label: string;
  readonly child: ChildProcess;
  stderr(): string;
  kubectl(args: readonly string[], options?: KubectlOptions): Promise<KubectlResult>;
  /** What of the stand-in is left on the Docker engine (containers, volumes, networks). */
  leftovers(): Promise<string[]>;
  /** SIGTERM, then the exit code once it has removed what it made. */
  stop(): Promise<number | null>;
  /** stop(), asserting a clean exit and nothing left on the Docker engine. */
  stopAndCheck(): Promise<void>;
}

/** kubectl must be on PATH: these machines have it (`.ci/run` checks). */
export function runKubectl(kubeconfig: string, args: readonly string[], options: KubectlOptions = {}): Promise<KubectlResult> {
  const all = [...(options.context ? ['--context', options.context] : []), ...args];
  const child = spawn('kubectl', all, { env: { ...process.env, KUBECONFIG: kubeconfig }, stdio: ['pipe', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  child.stdin.end(options.input ?? '');
  const timer = options.stopAfterMs ? setTimeout(() => child.kill('SIGTERM'), options.stopAfterMs) : undefined;
  return new Promise((resolve, reject) => {
    child.once('error', (err) => reject(new Error(`kubectl could not run (is it installed?): ${err.message}`)));
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/** `env` is added to the stand-in's environment (e.g. DOCKER_HOST, the engine its pods run on). */
export async function startKubernetesStandIn(
  extraArgs: readonly string[] = [],
  env: Readonly<Record<string, string>> = {},
): Promise<RunningKubernetesStandIn> {
  const { child, match, exited, stderr } = await spawnStandin(
    'kubernetes',
    extraArgs,
    /listening on (\d+)\nkubeconfig (.+)\ncontainers labelled (\S+)\n/,
    { ...process.env, ...env },
  );
  const started = { port: Number(match[1]), kubeconfig: match[2]!, label: match[3]! };
  const docker = new Dockerode();
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
    const code = await exited;
    clearTimeout(timer);
    return code;
  };
  const leftovers = async () => {
    const filters = { label: [started.label] };
    const containers = await docker.listContainers({ all: true, filters });
    const { Volumes: volumes } = await docker.listVolumes({ filters });
    const networks = await docker.listNetworks({ filters });
    return [...containers.map((c) => `container ${c.Names[0]}`), ...(volumes ?? []).map((v) => `volume ${v.Name}`), ...networks.map((n) => `network ${n.Name}`)];
  };
  return {
    ...started,
    child,
    stderr,
    kubectl: (args, options) => runKubectl(started.kubeconfig, args, options),
    leftovers,
    stop,
    stopAndCheck: async () => {
      const code = await stop();
      assert.equal(code, 0, `the Kubernetes stand-in exited with ${code}: ${stderr()}`);
      assert.deepEqual(await leftovers(), [], 'the Kubernetes stand-in left containers, volumes or networks behind');
    },
  };
}
