/** `berth check-command` and `berth doctor`: commands that need no running server (each loads its work once its flags are parsed). */
import { loadServerConfig } from './server-commands.js';
import { printCommandHelp } from './command-help.js';
import { noPositionals, parse, UsageError } from './usage.js';

export async function cmdCheckCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parse('check-command', argv, { home: { type: 'string' } });
  if (values.help) return printCommandHelp('check-command');
  const [command, ...rest] = positionals;
  if (command === undefined) throw new UsageError("check-command needs a command, e.g. berth check-command 'rm -rf build'");
  if (rest.length > 0) throw new UsageError(`unexpected arguments: ${rest.join(' ')} (quote the command as one argument)`);
  const { readAllStdin, runCheckCommand } = await import('./check-command.js');
  return runCheckCommand(command, values.home, { stdout: process.stdout, readStdin: readAllStdin });
}

export async function cmdDoctor(argv: string[]): Promise<number> {
  const { values, positionals } = parse('doctor', argv, { config: { type: 'string' }, backend: { type: 'string' } });
  if (values.help) return printCommandHelp('doctor');
  noPositionals('doctor', positionals);
  const config = await loadServerConfig(values);
  const { formatFinding, runDoctor } = await import('./doctor.js');
  process.stdout.write(`berth doctor: backend ${config.terminal.backend}\n`);
  const findings = await runDoctor(config, (f) => process.stdout.write(formatFinding(f)));
  const count = (v: string) => findings.filter((f) => f.verdict === v).length;
  process.stdout.write(`${count('ok')} ok, ${count('warn')} warnings, ${count('fail')} failed\n`);
  return count('fail') > 0 ? 1 : 0;
}
