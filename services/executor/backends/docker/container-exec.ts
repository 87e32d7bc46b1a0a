/**
 * One short command in a task's container by `docker exec` (not through the
 * exec agent), for what Berth checks in a container on its own account: a
 * disk measure, a snapshot probe. What comes back is the sandbox's output:
 * bounded, and only ever parsed by the caller.
 */
import type Dockerode from 'dockerode';

export interface ContainerExecResult {
  readonly exitCode: number;
  /** At most `maxBytes` of standard output. */
  readonly stdout: string;
  /** The first line of standard error, printable ASCII, at most 400 bytes. */
  readonly stderrLine: string;
}

export async function execInContainer(
  container: Dockerode.Container,
  command: { readonly cmd: readonly string[]; readonly user: string; readonly env?: readonly string[]; readonly maxBytes?: number },
): Promise<ContainerExecResult> {
  const maxBytes = command.maxBytes ?? 4096;
  const exec = await container.exec({
    Cmd: [...command.cmd],
    User: command.user,
    Env: [...(command.env ?? [])],
    AttachStdout: true,
    AttachStderr: true,
  });
  const stream = await exec.start({ hijack: true, stdin: false });
  const out = bounded(maxBytes);
  const err = bounded(400);
  await new Promise<void>((resolve, reject) => {
    container.modem.demuxStream(stream, out.sink, err.sink);
    stream.on('end', resolve);
    stream.on('close', resolve);
    stream.on('error', reject);
  });
  const { ExitCode } = await exec.inspect();
  return {
    exitCode: ExitCode ?? -1,
    stdout: out.text(),
    stderrLine: (err.text().split('\n')[0] ?? '').replace(/[^\x20-\x7e]/g, '?'),
  };
}

/** A sink that keeps the first `max` bytes written to it and drops the rest. */
function bounded(max: number): { sink: NodeJS.WritableStream; text: () => string } {
  const parts: Buffer[] = [];
  let size = 0;
  const sink = {
    write: (b: Buffer) => {
      if (size < max) parts.push(b.subarray(0, max - size));
      size += b.length;
      return true;
    },
  } as unknown as NodeJS.WritableStream;
  return { sink, text: () => Buffer.concat(parts).toString('utf8') };
}
