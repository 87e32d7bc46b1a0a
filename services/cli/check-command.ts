/**
 * `berth check-command`: classifies a shell command the way the approval
 * guard does, without a server and without running anything. Prints one JSON
 * line and exits with a code a CI lint step can branch on.
 */
import { homedir } from 'node:os';
import { checkCommand } from '../dispatcher/approval/detection/detect.js';

/** Exit codes: distinct from 1 (error) and 2 (usage), so scripts can tell them apart. */
export const CHECK_EXIT = { allow: 0, approve: 3, block: 4 } as const;

export interface CheckCommandIo {
  readonly stdout: { write(text: string): unknown };
  readonly readStdin: () => Promise<string>;
}

/** Runs the check; returns the exit code. `command` '-' reads stdin. */
export async function runCheckCommand(command: string, home: string | undefined, io: CheckCommandIo): Promise<number> {
  const text = command === '-' ? await io.readStdin() : command;
  const result = checkCommand(text, { homeDir: home ?? homedir() });
  io.stdout.write(`${JSON.stringify(result)}\n`);
  return CHECK_EXIT[result.verdict];
}

/** Reads all of stdin as UTF-8. */
export async function readAllStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(String(chunk)));
  return Buffer.concat(chunks).toString('utf8');
}
