/**
 * A real OpenSSH server in a container (sshd/ beside this file), started by
 * testcontainers, with a key pair made for this test run. Ryuk (the
 * testcontainers reaper) cannot be pulled here, so it is disabled and the
 * container is removed by {@link StartedSshd.stop} (also via `await using`).
 * testcontainers is a dev dependency: only the tests and the bench's ssh
 * case (in a source checkout) load this file.
 */
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import ssh2 from 'ssh2';

process.env.TESTCONTAINERS_RYUK_DISABLED ??= 'true';
// Imported after the setting above: testcontainers reads it when it first talks to Docker.
const { GenericContainer, Wait } = await import('testcontainers');
type StartedTestContainer = Awaited<ReturnType<InstanceType<typeof GenericContainer>['start']>>;

export const SSHD_IMAGE = 'berth-test-sshd:latest';
export const SSHD_USER = 'sandbox';
const SSHD_PORT = 2222;

const here = path.dirname(fileURLToPath(import.meta.url));
/** The checkout's root, from dist/services/cli/bench or services/cli/bench alike. */
const repoRoot = path.resolve(here, '..', '..', '..', ...(here.includes(`${path.sep}dist${path.sep}`) ? ['..'] : []));
/** The image's build context (not compiled, so always the source folder). */
const fixtureDir = path.join(repoRoot, 'services', 'cli', 'bench', 'sshd');

export interface KeyPair {
  readonly privateKey: string;
  readonly publicKey: string;
}

/**
 * A fresh ed25519 pair that ssh2 itself can read back. About 1 in 256 pairs
 * ssh2 generates cannot be (it strips leading zero bytes of the public key,
 * mscdex/ssh2#1390, #1513), which failed a test run now and then with
 * "Malformed OpenSSH private key": those are drawn again.
 */
export function generateKeyPair(comment = 'berth-test'): KeyPair {
  for (;;) {
    const pair = ssh2.utils.generateKeyPairSync('ed25519', { comment });
    const readable = [pair.private, pair.public].every((key) => !(ssh2.utils.parseKey(key) instanceof Error));
    if (readable) return { privateKey: pair.private, publicKey: pair.public };
  }
}

export interface StartedSshd extends AsyncDisposable {
  readonly host: string;
  readonly port: number;
  readonly user: string;
  /** Accepted by the server. */
  readonly keys: KeyPair;
  readonly containerId: string;
  /** Runs a command in the container (as the sandbox user unless `user` is given). */
  exec(command: readonly string[], user?: string): Promise<{ exitCode: number; output: string }>;
  /** Kills every sshd process (dropping all connections); sshd comes back on the same port. */
  restartSshd(): Promise<void>;
  stop(): Promise<void>;
}

let imageBuilt: Promise<void> | undefined;

/** Builds the sshd image once per process (Docker's layer cache makes later builds quick). */
export function buildSshdImage(): Promise<void> {
  imageBuilt ??= (async () => {
    const builder = GenericContainer.fromDockerfile(fixtureDir);
    await builder.build(SSHD_IMAGE, { deleteOnExit: false });
  })();
  return imageBuilt;
}

/** Waits until something on host:port speaks SSH. */
export async function waitForSshBanner(host: string, port: number, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const ok = await new Promise<boolean>((resolve) => {
      const socket = net.connect({ host, port });
      const done = (result: boolean) => {
        socket.destroy();
        resolve(result);
      };
      socket.setTimeout(2000, () => done(false));
      socket.once('data', (data) => done(data.toString('latin1').startsWith('SSH-')));
      socket.once('error', () => done(false));
      socket.once('close', () => done(false));
    });
    if (ok) return;
    if (Date.now() > deadline) throw new Error(`no ssh server on ${host}:${port} after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

export async function startSshd(keys: KeyPair = generateKeyPair()): Promise<StartedSshd> {
  await buildSshdImage();
  const container: StartedTestContainer = await new GenericContainer(SSHD_IMAGE)
    .withEnvironment({ AUTHORIZED_KEY: keys.publicKey })
    .withExposedPorts(SSHD_PORT)
    .withLabels({ 'berth.test': 'sshd' })
    .withWaitStrategy(Wait.forLogMessage(/Server listening on/))
    .start();
  const host = '127.0.0.1';
  const port = container.getMappedPort(SSHD_PORT);
  let stopped: Promise<void> | undefined;
  const stop = () => (stopped ??= container.stop({ remove: true, removeVolumes: true, timeout: 0 }).then(() => undefined));
  return {
    host,
    port,
    user: SSHD_USER,
    keys,
    containerId: container.getId(),
    exec: async (command, user = SSHD_USER) => {
      const r = await container.exec([...command], { user });
      return { exitCode: r.exitCode, output: r.output };
    },
    restartSshd: async () => {
      await container.exec(['pkill', '-KILL', '-x', 'sshd'], { user: 'root' });
      await waitForSshBanner(host, port);
    },
    stop,
    [Symbol.asyncDispose]: stop,
  };
}
