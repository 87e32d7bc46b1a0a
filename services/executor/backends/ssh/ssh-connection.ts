/**
 * One multiplexed ssh connection (ssh2 `Client`), shared by a tenant's tasks:
 * a channel per command, one SFTP session for files. When the connection
 * drops it is re-established on the next use, so callers never hold a dead
 * client.
 *
 * sshd limits the sessions (channels) open at once per connection
 * (`MaxSessions`, 10 by default). Commands queue for a slot; one slot is kept
 * for the SFTP session and one for control commands (kills), so a kill is
 * never stuck behind the very commands it has to stop.
 */
import ssh2 from 'ssh2';
import type { Client, ClientChannel, ConnectConfig, PseudoTtyOptions, SFTPWrapper } from 'ssh2';
import { UnavailableError } from '../../../common/errors.js';
import type { Logger } from '../../../common/logging.js';
import {
  checkHostKey,
  fingerprintSha256,
  hostKeyAlgorithmsFor,
  pinnedKeyTypes,
  type KnownHostsFile,
} from './known-hosts.js';
import { connectError, SshConnectError, type HostKeyRejection, type SshEndpoint } from './ssh-errors.js';

export type HostKeyPolicy = 'strict' | 'accept-new';

export interface SshConnectionOptions extends SshEndpoint {
  readonly privateKey: Buffer | string;
  readonly passphrase?: string;
  /** Shown in authentication errors (the configured key path). */
  readonly keyName: string;
  readonly knownHosts: KnownHostsFile;
  readonly hostKeyPolicy: HostKeyPolicy;
  readonly connectTimeoutMs: number;
  readonly keepaliveIntervalMs: number;
  readonly keepaliveCountMax: number;
  /** sshd's MaxSessions; default 10. */
  readonly maxSessions?: number;
  readonly logger?: Logger;
}

/** A counting semaphore whose waiters can give up (abort). */
class Slots {
  #free: number;
  readonly #waiters: { grant: () => void; cancel: () => void }[] = [];

  constructor(size: number) {
    this.#free = size;
  }

  acquire(signal?: AbortSignal): Promise<() => void> {
    if (signal?.aborted) return Promise.reject(signal.reason);
    let released = false;
    const release = () => {
      if (released) return;
      released = true;
      const next = this.#waiters.shift();
      if (next) next.grant();
      else this.#free += 1;
    };
    if (this.#free > 0) {
      this.#free -= 1;
      return Promise.resolve(release);
    }
    return new Promise((resolve, reject) => {
      const waiter = {
        grant: () => {
          signal?.removeEventListener('abort', onAbort);
          resolve(release);
        },
        cancel: () => reject(signal?.reason),
      };
      const onAbort = () => {
        const at = this.#waiters.indexOf(waiter);
        if (at >= 0) this.#waiters.splice(at, 1);
        waiter.cancel();
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.#waiters.push(waiter);
    });
  }
}

export interface ChannelRequest {
  /** Allocate a pseudo-terminal (stdout and stderr arrive merged). */
  readonly pty?: boolean;
  /** Use the reserved control slot (kills): never queues behind commands. */
  readonly control?: boolean;
  /** Gives up waiting for a slot or for the connection. */
  readonly signal?: AbortSignal;
}

/** An open exec channel and the slot it holds (released when the channel closes). */
export interface OpenChannel {
  readonly channel: ClientChannel;
  /** Which connection it runs on; changes after a reconnect. */
  readonly generation: number;
}

const PTY: PseudoTtyOptions = { term: 'xterm-256color', cols: 200, rows: 50 };

/** Errors that mean the client died under us: reconnect and try once more. */
function isDeadConnection(err: unknown): boolean {
  const message = err instanceof Error ? err.message : String(err);
  return /not connected|no response from server|channel open failure: connection closed|socket|ECONNRESET|EPIPE/i.test(message);
}

/** sshd refused a channel because MaxSessions is reached (reason 2, administratively prohibited). */
function isServerFull(err: unknown): boolean {
  return (err as { reason?: unknown } | null)?.reason === 2 && /open failed/i.test(String(err));
}

/** How often a channel refused for MaxSessions is retried (about 10 s in all). */
const SERVER_FULL_RETRIES = 50;

export class SshConnection {
  readonly #options: SshConnectionOptions;
  readonly #general: Slots;
  readonly #control = new Slots(1);
  #client: Promise<Client> | undefined;
  #sftp: Promise<SFTPWrapper> | undefined;
  #generation = 0;
  #closed = false;

  constructor(options: SshConnectionOptions) {
    this.#options = options;
    this.#general = new Slots(Math.max(1, (options.maxSessions ?? 10) - 2));
  }

  get endpoint(): SshEndpoint {
    return { host: this.#options.host, port: this.#options.port, user: this.#options.user };
  }

  /** Increases on every (re)connect. */
  get generation(): number {
    return this.#generation;
  }

  /** The live client, connecting first when there is none. Rejects with {@link SshConnectError}. */
  connect(): Promise<Client> {
    if (this.#closed) return Promise.reject(new UnavailableError(`the ssh connection to ${this.#where()} was closed`));
    if (!this.#client) {
      const attempt = this.#connect();
      this.#client = attempt;
      attempt.catch(() => {
        if (this.#client === attempt) this.#client = undefined;
      });
    }
    return this.#client;
  }

  /** Opens an exec channel for `command`, queueing for a slot. */
  async exec(command: string, request: ChannelRequest = {}): Promise<OpenChannel> {
    const release = await (request.control ? this.#control : this.#general).acquire(request.signal);
    try {
      for (let attempt = 0; ; attempt++) {
        const client = await this.connect();
        const generation = this.#generation;
        try {
          const channel = await new Promise<ClientChannel>((resolve, reject) => {
            const options = request.pty ? { pty: PTY } : {};
            client.exec(command, options, (err, ch) => (err ? reject(err) : resolve(ch)));
          });
          channel.once('close', release);
          return { channel, generation };
        } catch (err) {
          if (attempt === 0 && isDeadConnection(err)) {
            this.#drop(client, 'channel open failed on a dead connection');
            continue;
          }
          if (isServerFull(err) && attempt < SERVER_FULL_RETRIES) {
            // sshd frees a session slot a moment after the channel closed; wait for it.
            await new Promise((resolve) => setTimeout(resolve, Math.min(25 * (attempt + 1), 250)));
            continue;
          }
          throw new UnavailableError(
            `cannot open an ssh channel to ${this.#where()}: ${err instanceof Error ? err.message : String(err)}`,
            { cause: err },
          );
        }
      }
    } catch (err) {
      release();
      throw err;
    }
  }

  /** The connection's SFTP session, opened on first use and after each reconnect. */
  sftp(): Promise<SFTPWrapper> {
    if (!this.#sftp) {
      const attempt = (async () => {
        for (let tries = 0; ; tries++) {
          const client = await this.connect();
          try {
            return await new Promise<SFTPWrapper>((resolve, reject) => {
              client.sftp((err, sftp) => {
                if (err) {
                  reject(err);
                  return;
                }
                sftp.once('close', () => {
                  if (this.#sftp === attempt) this.#sftp = undefined;
                });
                resolve(sftp);
              });
            });
          } catch (err) {
            // Its slot is kept free of commands, but sshd frees a closed channel's session a moment late:
            // under a burst of commands the SFTP open can be refused as MaxSessions; wait as exec does.
            if (isServerFull(err) && tries < SERVER_FULL_RETRIES) {
              await new Promise((resolve) => setTimeout(resolve, Math.min(25 * (tries + 1), 250)));
              continue;
            }
            throw new UnavailableError(`cannot start SFTP on ${this.#where()}: ${(err as Error).message}`, { cause: err });
          }
        }
      })();
      this.#sftp = attempt;
      attempt.catch(() => {
        if (this.#sftp === attempt) this.#sftp = undefined;
      });
    }
    return this.#sftp;
  }

  /** Closes the connection for good. */
  async close(): Promise<void> {
    this.#closed = true;
    const client = await this.#client?.catch(() => undefined);
    this.#client = undefined;
    this.#sftp = undefined;
    if (!client) return;
    await new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        client.destroy();
        resolve();
      }, 2000);
      client.once('close', () => {
        clearTimeout(timer);
        resolve();
      });
      client.end();
    });
  }

  /** Forgets `client` (dropped, or found dead); the next use reconnects. */
  #drop(client: Client, why: string): void {
    void this.#client?.then(
      (current) => {
        if (current !== client) return;
        this.#client = undefined;
        this.#sftp = undefined;
        this.#options.logger?.info({ host: this.#where(), why }, 'ssh connection dropped; reconnecting on next use');
      },
      () => undefined,
    );
    client.destroy();
  }

  #where(): string {
    return `${this.#options.host}:${this.#options.port}`;
  }

  async #connect(): Promise<Client> {
    const o = this.#options;
    const entries = await o.knownHosts.read();
    const pinnedTypes = pinnedKeyTypes(entries, o.host, o.port);
    let rejection: HostKeyRejection | undefined;
    let toPin: Buffer | undefined;

    const hostVerifier = (key: Buffer): boolean => {
      const status = checkHostKey(entries, o.host, o.port, key);
      const presented = fingerprintSha256(key);
      switch (status.kind) {
        case 'known':
          return true;
        case 'unknown':
          if (o.hostKeyPolicy === 'accept-new') {
            toPin = Buffer.from(key);
            return true;
          }
          rejection = { kind: 'unknown', presented, file: o.knownHosts.path };
          return false;
        case 'changed':
          rejection = {
            kind: 'changed',
            presented,
            pinned: status.knownFingerprints,
            file: o.knownHosts.path,
            lines: status.lines,
          };
          return false;
        case 'revoked':
          rejection = { kind: 'revoked', presented, file: o.knownHosts.path, line: status.line };
          return false;
      }
    };

    const config: ConnectConfig = {
      host: o.host,
      port: o.port,
      username: o.user,
      privateKey: o.privateKey,
      ...(o.passphrase !== undefined ? { passphrase: o.passphrase } : {}),
      // Key only, like BatchMode: never fall back to prompts.
      authHandler: ['publickey'],
      readyTimeout: o.connectTimeoutMs,
      keepaliveInterval: o.keepaliveIntervalMs,
      keepaliveCountMax: o.keepaliveCountMax,
      hostVerifier,
      ...(pinnedTypes.length > 0
        ? { algorithms: { serverHostKey: hostKeyAlgorithmsFor(pinnedTypes) as NonNullable<ConnectConfig['algorithms']>['serverHostKey'] } }
        : {}),
    };

    const client = new ssh2.Client();
    const ready = await new Promise<boolean>((resolve, reject) => {
      let settled = false;
      const fail = (err: unknown) => {
        if (settled) return;
        settled = true;
        client.destroy();
        reject(err instanceof SshConnectError ? err : connectError(err, this.endpoint, {
          ...(rejection ? { rejection } : {}),
          timeoutMs: o.connectTimeoutMs,
          keyName: o.keyName,
        }));
      };
      client.once('ready', () => {
        if (settled) return;
        settled = true;
        resolve(true);
      });
      client.on('error', (err) => {
        if (!settled) fail(err);
        else o.logger?.warn({ err, host: this.#where() }, 'ssh connection error');
      });
      client.once('close', () => {
        if (!settled) fail(new Error('the host closed the connection during the handshake'));
        else this.#drop(client, 'connection closed');
      });
      try {
        client.connect(config);
      } catch (err) {
        // ssh2 throws synchronously for an unusable private key.
        fail(err);
      }
    });
    if (ready && toPin) {
      try {
        await o.knownHosts.add(o.host, o.port, toPin);
        o.logger?.info(
          { host: this.#where(), fingerprint: fingerprintSha256(toPin), file: o.knownHosts.path },
          'pinned a new ssh host key (accept-new)',
        );
      } catch (err) {
        client.destroy();
        throw new UnavailableError(`cannot record the host key of ${this.#where()} in ${o.knownHosts.path}: ${String(err)}`, {
          cause: err,
        });
      }
    }
    this.#generation += 1;
    return client;
  }
}
