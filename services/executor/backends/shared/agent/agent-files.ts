/**
 * File operations through the exec agent: reads and writes in
 * {@link FILE_CHUNK_BYTES} chunks, one request each, and stat. The agent's
 * answers are checked, not trusted.
 */
import { FailedPreconditionError } from '../../../../common/errors.js';
import { fileTooLargeError } from '../file-errors.js';
import { MAX_READ_FILE_BYTES } from '../file-limits.js';
import type { SandboxStat } from '../sandbox-channel.js';
import type { AgentLink } from './agent-link.js';
import { agentFileError } from './agent-op-error.js';
import { FILE_CHUNK_BYTES, type Frame } from './agent-protocol.js';

/**
 * Reads a regular file chunk by chunk; the agent refuses other file types
 * and files over the cap. A chunk longer than asked, or more in all than the
 * cap, ends the read.
 */
export async function readAgentFile(agent: AgentLink, absPath: string): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let total = 0;
  try {
    for (;;) {
      const frame = await agent.request('read', {
        path: absPath,
        offset: total,
        length: FILE_CHUNK_BYTES,
        max: MAX_READ_FILE_BYTES,
      });
      if (frame.body.length > FILE_CHUNK_BYTES) throw agent.fault(`the exec agent of ${agent.description} sent more file data than asked`);
      chunks.push(frame.body);
      total += frame.body.length;
      if (total > MAX_READ_FILE_BYTES) throw fileTooLargeError(absPath, total);
      if (frame.header.eof === true || frame.body.length < FILE_CHUNK_BYTES) break;
    }
  } catch (err) {
    throw agentFileError(err, absPath, 'read');
  }
  return Buffer.concat(chunks, total);
}

/**
 * Writes atomically, chunk by chunk: the agent puts them in a temp file
 * beside the file and renames it over the file with the last one, so nobody
 * sees a half-written file. The first chunk's answer names the write for the
 * rest; a write that fails halfway is aborted (the agent removes its temp
 * file; it also does when the stream drops).
 */
export async function writeAgentFile(agent: AgentLink, absPath: string, data: Uint8Array): Promise<void> {
  if (!agent.capabilities.includes('atomic-write')) {
    throw new FailedPreconditionError(
      `the exec agent of ${agent.description} cannot write files atomically (an older agent); run the one shipped with this executor`,
    );
  }
  let write: number | undefined;
  try {
    let offset = 0;
    do {
      const end = Math.min(offset + FILE_CHUNK_BYTES, data.byteLength);
      const last = end >= data.byteLength;
      const frame = await agent.request(
        'write',
        { path: absPath, offset, last, ...(write !== undefined ? { write } : {}) },
        data.subarray(offset, end),
      );
      if (last) write = undefined;
      else if (write === undefined) {
        const named = frame.header.write;
        if (typeof named !== 'number' || !Number.isSafeInteger(named)) throw agent.fault(`the exec agent of ${agent.description} did not name its write`);
        write = named;
      }
      offset = end;
    } while (offset < data.byteLength);
  } catch (err) {
    if (write !== undefined && !agent.isLost()) await agent.request('abort', { write }).catch(() => undefined);
    throw agentFileError(err, absPath, 'write');
  }
}

export async function statAgentFile(agent: AgentLink, absPath: string): Promise<SandboxStat> {
  let frame: Frame;
  try {
    frame = await agent.request('stat', { path: absPath });
  } catch (err) {
    throw agentFileError(err, absPath, 'stat');
  }
  const h = frame.header;
  return {
    exists: h.exists === true,
    isDirectory: h.is_dir === true,
    sizeBytes: typeof h.size === 'number' ? h.size : 0,
    uid: typeof h.uid === 'number' ? h.uid : -1,
  };
}
