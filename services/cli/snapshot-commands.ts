/**
 * `berth snapshot`, `fork`, `snapshots` and `snapshot-delete`: task
 * snapshots and forks on a running server (docs/lifecycle.md). Each prints
 * the server's answer as JSON on stdout.
 */
import { SNAPSHOT_ID_PATTERN } from '../common/snapshot-ids.js';
import type { SnapshotInfo } from '../gen/berth/v1/dispatcher.js';
import { CLIENT_OPTIONS } from './client-options.js';
import { metadataFor, withClient } from './client-commands.js';
import { printCommandHelp } from './command-help.js';
import { noPositionals, parse, UsageError } from './usage.js';


/** The JSON the commands print for a snapshot (the API's field names). */
export function snapshotJson(s: SnapshotInfo): Record<string, unknown> {
  return {
    snapshot_id: s.snapshotId,
    label: s.label,
    source_task_id: s.sourceTaskId,
    backend: s.backend,
    created_at: s.createdAt,
    size_bytes: s.sizeBytes,
    includes_processes: s.includesProcesses,
    includes: s.includes,
  };
}

function print(value: unknown): number {
  process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
  return 0;
}

function onePositional(command: string, what: string, positionals: readonly string[]): string {
  const [first, ...rest] = positionals;
  if (first === undefined) throw new UsageError(`berth ${command} needs ${what} ('berth ${command} --help' shows an example)`);
  if (rest.length > 0) throw new UsageError(`berth ${command} takes one ${what}, got also: ${rest.join(' ')}`);
  return first;
}

export async function cmdSnapshot(argv: string[]): Promise<number> {
  const { values, positionals } = parse('snapshot', argv, { ...CLIENT_OPTIONS, label: { type: 'string' } });
  if (values.help) return printCommandHelp('snapshot');
  const taskId = onePositional('snapshot', 'a task id', positionals);
  return withClient(values, async ({ client }) => {
    const r = await client.snapshot({ taskId, label: values.label ?? '' }, { metadata: await metadataFor(values['api-key']) });
    return print(r.snapshot ? snapshotJson(r.snapshot) : {});
  });
}

export async function cmdFork(argv: string[]): Promise<number> {
  const { values, positionals } = parse('fork', argv, { ...CLIENT_OPTIONS, task: { type: 'string' }, label: { type: 'string' } });
  if (values.help) return printCommandHelp('fork');
  const from = onePositional('fork', 'a snapshot id or a task id', positionals);
  if (values.task === undefined || values.task === '') throw new UsageError('berth fork needs --task NEW, the id of the task to make');
  const source = SNAPSHOT_ID_PATTERN.test(from) ? { snapshotId: from, sourceTaskId: '' } : { snapshotId: '', sourceTaskId: from };
  return withClient(values, async ({ client }) => {
    const r = await client.fork({ ...source, taskId: values.task ?? '', label: values.label ?? '' }, { metadata: await metadataFor(values['api-key']) });
    return print({ task_id: r.taskId, snapshot: r.snapshot ? snapshotJson(r.snapshot) : {} });
  });
}

export async function cmdSnapshots(argv: string[]): Promise<number> {
  const { values, positionals } = parse('snapshots', argv, { ...CLIENT_OPTIONS });
  if (values.help) return printCommandHelp('snapshots');
  noPositionals('snapshots', positionals);
  return withClient(values, async ({ client }) => {
    const r = await client.listSnapshots({}, { metadata: await metadataFor(values['api-key']) });
    return print(r.snapshots.map(snapshotJson));
  });
}

export async function cmdSnapshotDelete(argv: string[]): Promise<number> {
  const { values, positionals } = parse('snapshot-delete', argv, { ...CLIENT_OPTIONS });
  if (values.help) return printCommandHelp('snapshot-delete');
  const snapshotId = onePositional('snapshot-delete', 'a snapshot id', positionals);
  return withClient(values, async ({ client }) => {
    const r = await client.deleteSnapshot({ snapshotId }, { metadata: await metadataFor(values['api-key']) });
    return print({ snapshot_id: snapshotId, deleted: r.deleted });
  });
}
