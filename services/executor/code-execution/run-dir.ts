/**
 * The staging dir of one execute_code run, inside the task's rpcDir.
 *
 * On container backends the rpcDir is writable by the sandbox user while the
 * executor (often root) works in it, and a process in the sandbox may rename
 * our directory and plant a symlink in its place at any moment. So the
 * directory is created private (0700, ours), opened once without following
 * links, and every later operation goes through that descriptor
 * (`/proc/self/fd/N/...`), never through a path the sandbox could redirect:
 * files are created with O_EXCL, owners are changed on the entries we made
 * while nobody else could enter, the directory itself is handed over last,
 * and stderr is read with O_NOFOLLOW, regular files only, at most N bytes.
 */
import { constants, existsSync } from 'node:fs';
import { chmod, lchown, mkdir, open, rm, writeFile, type FileHandle } from 'node:fs/promises';
import path from 'node:path';
import { FailedPreconditionError } from '../../common/errors.js';

/** Whether paths through an open directory descriptor are available (Linux). */
const PROC_FD = existsSync('/proc/self/fd');

export class RunDir implements AsyncDisposable {
  /** Where the directory is, as the executor sees it. */
  readonly hostPath: string;
  readonly #handle: FileHandle | undefined;
  #closed = false;

  private constructor(hostPath: string, handle: FileHandle | undefined) {
    this.hostPath = hostPath;
    this.#handle = handle;
  }

  /** Creates `parent/name` (which must not exist) private to the executor. */
  static async create(parent: string, name: string): Promise<RunDir> {
    const hostPath = path.join(parent, name);
    await mkdir(hostPath, { mode: 0o700 });
    if (!PROC_FD) return new RunDir(hostPath, undefined);
    const handle = await open(hostPath, constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW);
    const info = await handle.stat();
    const ourUid = process.getuid?.();
    if (!info.isDirectory() || (ourUid !== undefined && info.uid !== ourUid)) {
      await handle.close();
      throw new FailedPreconditionError(`the execute_code staging dir ${hostPath} was replaced while it was being created`);
    }
    return new RunDir(hostPath, handle);
  }

  /** A path to `name` inside this very directory, whatever happened to its name since. */
  entry(name: string): string {
    return this.#handle ? `/proc/self/fd/${this.#handle.fd}/${name}` : path.join(this.hostPath, name);
  }

  /** Creates a new file (never replaces or follows anything), mode 0600. */
  async writeNew(name: string, content: string): Promise<void> {
    await writeFile(this.entry(name), content, { flag: 'wx', mode: 0o600 });
  }

  /**
   * Gives `names` (created by us, in the still-private dir) and then the dir
   * itself to `owner`. After this the sandbox user may change anything inside.
   */
  async handTo(owner: { readonly uid: number; readonly gid: number }, names: readonly string[]): Promise<void> {
    for (const name of names) await lchown(this.entry(name), owner.uid, owner.gid);
    if (this.#handle) await this.#handle.chown(owner.uid, owner.gid);
    else await lchown(this.hostPath, owner.uid, owner.gid);
  }

  /** Sets the mode of an entry we created (before {@link handTo}). */
  async chmod(name: string, mode: number): Promise<void> {
    await chmod(this.entry(name), mode);
  }

  /**
   * Up to `maxBytes` of a regular file the sandbox wrote; empty when it is
   * missing, a link, a FIFO or anything else.
   */
  async readHead(name: string, maxBytes: number): Promise<Buffer> {
    let file: FileHandle;
    try {
      file = await open(this.entry(name), constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
    } catch {
      return Buffer.alloc(0);
    }
    try {
      if (!(await file.stat()).isFile()) return Buffer.alloc(0);
      const buffer = Buffer.alloc(Math.max(0, maxBytes));
      let filled = 0;
      while (filled < buffer.length) {
        const { bytesRead } = await file.read(buffer, filled, buffer.length - filled, filled);
        if (bytesRead === 0) break;
        filled += bytesRead;
      }
      return buffer.subarray(0, filled);
    } finally {
      await file.close();
    }
  }

  /**
   * Removes the directory. `rm` never follows links: if the sandbox swapped
   * the name for a link, the link goes and our directory stays, in the
   * sandbox's own space.
   */
  async remove(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    try {
      await rm(this.hostPath, { recursive: true, force: true });
    } finally {
      await this.#handle?.close();
    }
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.remove();
  }
}
