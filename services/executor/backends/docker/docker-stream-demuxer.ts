/**
 * Splits Docker's multiplexed attach/exec stream (no TTY) into stdout and
 * stderr payloads, in arrival order. Each record is an 8-byte header
 * (stream type, three zero bytes, u32be size) and the payload; records
 * arrive cut anywhere across chunks. Pure.
 */

export type DockerStreamType = 'stdin' | 'stdout' | 'stderr';

export interface DemuxedChunk {
  readonly stream: DockerStreamType;
  readonly data: Buffer;
}

const TYPES: Readonly<Record<number, DockerStreamType>> = { 0: 'stdin', 1: 'stdout', 2: 'stderr' };

export class DockerStreamDemuxer {
  #pending: Buffer = Buffer.alloc(0);

  push(chunk: Buffer): DemuxedChunk[] {
    let data = this.#pending.length > 0 ? Buffer.concat([this.#pending, chunk]) : chunk;
    const out: DemuxedChunk[] = [];
    while (data.length >= 8) {
      const type = TYPES[data[0]!];
      const size = data.readUInt32BE(4);
      if (data.length < 8 + size) break;
      if (type && size > 0) out.push({ stream: type, data: Buffer.from(data.subarray(8, 8 + size)) });
      data = data.subarray(8 + size);
    }
    this.#pending = Buffer.from(data);
    return out;
  }

  /** Bytes of an unfinished record (a cut-off stream). */
  get pendingBytes(): number {
    return this.#pending.length;
  }
}
