/**
 * An image's own /etc/passwd and /etc/group, read once per image id: the
 * task's account files are made from them (task-identity.ts) and bound
 * read-only over the container's, so every account of the image keeps its
 * name and only the sandbox user moves to the task's ids.
 *
 * Read from a container created for the purpose and never started (a task
 * container cannot be asked: Docker answers an archive request with the
 * files bound over the path). The probe carries the executor's labels, so a
 * sweep removes it if the executor dies before it does.
 */
import type Dockerode from 'dockerode';
import { dockerError, isNotFound } from './docker-errors.js';
import type { AccountFiles } from './task-identity.js';

/** Account files larger than this are refused (a sandbox image's are a few KiB). */
export const MAX_ACCOUNT_FILE_BYTES = 1024 * 1024;

/** Symlinks followed from /etc/passwd or /etc/group to the file. */
const MAX_LINK_HOPS = 4;

const BLOCK = 512;

/** One entry of a tar stream: what the archive endpoint returns for one path. */
export interface TarEntry {
  readonly type: 'file' | 'symlink' | 'other';
  readonly linkTarget: string;
  readonly data: Buffer;
}

function field(header: Buffer, offset: number, length: number): string {
  const raw = header.subarray(offset, offset + length);
  const end = raw.indexOf(0);
  return raw.subarray(0, end < 0 ? raw.length : end).toString('utf8');
}

function octal(header: Buffer, offset: number, length: number): number {
  const text = field(header, offset, length).trim();
  if (!/^[0-7]*$/.test(text)) throw new Error(`malformed tar header: size field "${text}"`);
  return text === '' ? 0 : parseInt(text, 8);
}

/**
 * The first real entry of a tar archive (PAX and GNU long-name records
 * before it are skipped; a PAX `linkpath` record is honoured). Enough for
 * the one-path archives Docker returns; anything else is an error.
 */
export function firstTarEntry(archive: Buffer): TarEntry {
  let offset = 0;
  let paxLink: string | undefined;
  while (offset + BLOCK <= archive.length) {
    const header = archive.subarray(offset, offset + BLOCK);
    if (header.every((b) => b === 0)) break;
    const size = octal(header, 124, 12);
    const typeflag = String.fromCharCode(header[156] ?? 0);
    const dataStart = offset + BLOCK;
    const data = archive.subarray(dataStart, dataStart + size);
    if (data.length < size) throw new Error('truncated tar archive');
    offset = dataStart + Math.ceil(size / BLOCK) * BLOCK;
    if (typeflag === 'x') {
      paxLink = /(?:^|\n)\d+ linkpath=([^\n]*)\n/.exec(data.toString('utf8'))?.[1] ?? paxLink;
      continue;
    }
    if (typeflag === 'g' || typeflag === 'L' || typeflag === 'K') continue;
    if (typeflag === '0' || typeflag === '\0' || typeflag === '7') return { type: 'file', linkTarget: '', data };
    if (typeflag === '2') return { type: 'symlink', linkTarget: paxLink ?? field(header, 157, 100), data: Buffer.alloc(0) };
    return { type: 'other', linkTarget: '', data: Buffer.alloc(0) };
  }
  throw new Error('empty tar archive');
}

async function readAll(stream: NodeJS.ReadableStream, maxBytes: number): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let total = 0;
  for await (const chunk of stream as AsyncIterable<Buffer | string>) {
    const b = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
    total += b.length;
    if (total > maxBytes) {
      (stream as NodeJS.ReadableStream & { destroy?: () => void }).destroy?.();
      throw new Error(`archive larger than ${maxBytes} bytes`);
    }
    chunks.push(b);
  }
  return Buffer.concat(chunks, total);
}

/** A file of the (never started) container, following symlinks; undefined when the image has none. */
async function readImageFile(container: Dockerode.Container, file: string): Promise<string | undefined> {
  let current = file;
  for (let hop = 0; hop <= MAX_LINK_HOPS; hop++) {
    let archive: Buffer;
    try {
      archive = await readAll(await container.getArchive({ path: current }), MAX_ACCOUNT_FILE_BYTES + 64 * 1024);
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw err;
    }
    const entry = firstTarEntry(archive);
    if (entry.type === 'file') {
      if (entry.data.length > MAX_ACCOUNT_FILE_BYTES) throw new Error(`${file} is larger than ${MAX_ACCOUNT_FILE_BYTES} bytes`);
      return entry.data.toString('utf8');
    }
    if (entry.type !== 'symlink' || entry.linkTarget === '') return undefined;
    current = entry.linkTarget.startsWith('/') ? entry.linkTarget : `${current.slice(0, current.lastIndexOf('/') + 1)}${entry.linkTarget}`;
  }
  return undefined;
}

export interface ImageAccountsOptions {
  readonly docker: Dockerode;
  readonly daemon: string;
  /** Labels of the probe container (the executor's, so an orphan sweep finds it). */
  readonly labels: () => Readonly<Record<string, string>>;
}

/** The account files of each image, asked once per image id (a failed read is asked again next time). */
export class ImageAccounts {
  readonly #o: ImageAccountsOptions;
  readonly #byImageId = new Map<string, Promise<Partial<AccountFiles>>>();

  constructor(options: ImageAccountsOptions) {
    this.#o = options;
  }

  /** `/etc/passwd` and `/etc/group` of `image` (whose id is `imageId`); a file the image lacks is absent. */
  of(image: string, imageId: string): Promise<Partial<AccountFiles>> {
    let known = this.#byImageId.get(imageId);
    if (!known) {
      known = this.#read(image);
      this.#byImageId.set(imageId, known);
      known.catch(() => this.#byImageId.delete(imageId));
    }
    return known;
  }

  async #read(image: string): Promise<Partial<AccountFiles>> {
    const { docker, daemon } = this.#o;
    let probe: Dockerode.Container;
    try {
      probe = await docker.createContainer({
        Image: image,
        // Never started: the command only has to exist as a field.
        Entrypoint: ['/nonexistent'],
        Cmd: [],
        NetworkDisabled: true,
        Labels: { ...this.#o.labels() },
        HostConfig: { NetworkMode: 'none', AutoRemove: false },
      });
    } catch (err) {
      throw dockerError(err, `reading the accounts of image ${image}`, daemon);
    }
    try {
      const [passwd, group] = await Promise.all([readImageFile(probe, '/etc/passwd'), readImageFile(probe, '/etc/group')]);
      return { ...(passwd !== undefined ? { passwd } : {}), ...(group !== undefined ? { group } : {}) };
    } catch (err) {
      throw dockerError(err, `reading /etc/passwd and /etc/group of image ${image}`, daemon);
    } finally {
      await probe.remove({ force: true, v: true }).catch(() => undefined);
    }
  }
}
