/** `berth suspend TASK` and `berth resume TASK`: suspend a task's environment, or resume it now (docs/suspend.md). */
import { CLIENT_OPTIONS } from './client-options.js';
import { metadataFor, withClient } from './client-commands.js';
import { printCommandHelp } from './command-help.js';
import { parse, UsageError } from './usage.js';

function taskOf(command: string, positionals: readonly string[]): string {
  const [task, ...extra] = positionals;
  if (task === undefined || task === '' || extra.length > 0) {
    throw new UsageError(`berth ${command} takes one task id, e.g. berth ${command} t1 ('berth ${command} --help' shows its flags)`);
  }
  return task;
}

/** Prints `{"suspended": bool, "processes_kept": bool}`; suspended is false when the task has no environment. */
export async function cmdSuspend(argv: string[]): Promise<number> {
  const { values, positionals } = parse('suspend', argv, CLIENT_OPTIONS);
  if (values.help) return printCommandHelp('suspend');
  const taskId = taskOf('suspend', positionals);
  return withClient(values, async ({ client }) => {
    const r = await client.suspend({ taskId }, { metadata: await metadataFor(values['api-key']) });
    process.stdout.write(`${JSON.stringify({ suspended: r.suspended, processes_kept: r.processesKept })}\n`);
    return 0;
  });
}

/** Prints `{"resumed": bool}`; false when the task has no environment or was not suspended. */
export async function cmdResume(argv: string[]): Promise<number> {
  const { values, positionals } = parse('resume', argv, CLIENT_OPTIONS);
  if (values.help) return printCommandHelp('resume');
  const taskId = taskOf('resume', positionals);
  return withClient(values, async ({ client }) => {
    const r = await client.resume({ taskId }, { metadata: await metadataFor(values['api-key']) });
    process.stdout.write(`${JSON.stringify({ resumed: r.resumed })}\n`);
    return 0;
  });
}
