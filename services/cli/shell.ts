/**
 * `berth shell`: an interactive prompt for trying tools by hand over one
 * Session stream. Each line is `TOOL [ARGS_JSON]` (or `!COMMAND` for the
 * terminal tool); the task id is kept between lines, live output is shown as
 * it comes, then the result JSON. Approval requests are asked on the
 * terminal; without one they are denied. Background-process events of the
 * tasks called (notify_on_complete, watch_patterns, heartbeats) are printed
 * between commands, with the text the agent would get.
 */
import { createInterface, type Interface } from 'node:readline';
import type { Metadata } from 'nice-grpc';
import type { DispatcherClient } from '../gen/berth/v1/dispatcher.js';
import { promptApproval, type PromptInput } from './approval-prompt.js';
import type { BackgroundEvent } from '../client/task-events.js';
import { SessionConnection } from './session-connection.js';

const LINE_HELP = `TOOL [ARGS_JSON]     run a tool, e.g. read_file {"path":"/etc/hostname"}
!COMMAND             run COMMAND with the terminal tool
/task ID             switch task (environment: cwd, variables, processes)
/session ID          switch session (approvals given "for this session")
/yolo on|off         run this session's commands without approval prompts (hardline still blocks)
/events              print background-process events that arrived (also shown before each prompt)
/help  /quit`;

export type ShellLine =
  | { readonly kind: 'empty' }
  | { readonly kind: 'quit' }
  | { readonly kind: 'help' }
  | { readonly kind: 'task'; readonly id: string }
  | { readonly kind: 'session'; readonly id: string }
  | { readonly kind: 'yolo'; readonly enabled: boolean }
  | { readonly kind: 'events' }
  | { readonly kind: 'call'; readonly name: string; readonly argumentsJson: string }
  | { readonly kind: 'error'; readonly message: string };

/** Parses one input line (pure, for tests). */
export function parseShellLine(line: string): ShellLine {
  const text = line.trim();
  if (text === '' || text.startsWith('#')) return { kind: 'empty' };
  if (text.startsWith('!')) {
    const command = text.slice(1).trim();
    if (command === '') return { kind: 'error', message: '!COMMAND needs a command' };
    return { kind: 'call', name: 'terminal', argumentsJson: JSON.stringify({ command }) };
  }
  if (text.startsWith('/')) {
    const [word = '', ...rest] = text.slice(1).split(/\s+/);
    const arg = rest.join(' ');
    switch (word) {
      case 'quit':
      case 'exit':
        return { kind: 'quit' };
      case 'help':
        return { kind: 'help' };
      case 'events':
        return { kind: 'events' };
      case 'task':
      case 'session':
        if (arg === '') return { kind: 'error', message: `/${word} needs an id` };
        return word === 'task' ? { kind: 'task', id: arg } : { kind: 'session', id: arg };
      case 'yolo':
        if (arg !== 'on' && arg !== 'off') return { kind: 'error', message: '/yolo on|off' };
        return { kind: 'yolo', enabled: arg === 'on' };
      default:
        return { kind: 'error', message: `unknown command /${word}; try /help` };
    }
  }
  const m = /^(\S+)\s*([\s\S]*)$/.exec(text);
  return { kind: 'call', name: m?.[1] ?? text, argumentsJson: m?.[2]?.trim() || '{}' };
}

export interface ShellOptions {
  readonly client: DispatcherClient;
  readonly metadata: Metadata;
  readonly taskId: string;
  readonly sessionId: string;
  readonly yolo: boolean;
  readonly input: NodeJS.ReadableStream & PromptInput;
  readonly output: NodeJS.WritableStream;
  /** One line for a failed call (the CLI explains transport and TLS failures); default: the error's message. */
  readonly describeError?: (err: unknown) => Promise<string>;
}

/** Reads one line on a TTY with a fresh readline (so approval prompts can own the keyboard in between). */
function readTtyLine(input: NodeJS.ReadableStream, output: NodeJS.WritableStream, prompt: string, history: string[]): Promise<string | null> {
  const rl: Interface = createInterface({ input, output, terminal: true, history, historySize: 500 });
  return new Promise<string | null>((resolve) => {
    let answered = false;
    rl.on('SIGINT', () => {
      answered = true;
      output.write('\n');
      rl.close();
      resolve('');
    });
    rl.once('close', () => {
      if (!answered) resolve(null);
    });
    rl.question(prompt, (line) => {
      answered = true;
      rl.close();
      resolve(line);
    });
  });
}

export async function runShell(options: ShellOptions): Promise<number> {
  const { client, metadata, input, output } = options;
  let taskId = options.taskId;
  let sessionId = options.sessionId;
  let connection: SessionConnection | undefined;
  let yolo = options.yolo;
  const print = (text: string) => output.write(text.endsWith('\n') ? text : `${text}\n`);
  /** Events that arrived since the last prompt; printed between commands, never into a running one's output. */
  let pending: BackgroundEvent[] = [];
  const printEvents = () => {
    const events = pending;
    pending = [];
    for (const event of events) print(`\n[event ${event.type} · task ${event.taskId}${event.id ? ` · id ${event.id}` : ''}]\n${event.text}`);
  };

  const connect = (): SessionConnection => {
    if (connection !== undefined) return connection;
    const fresh = new SessionConnection(
      client,
      {
        onApproval: (request, signal) => promptApproval(request, { input, output }, signal),
        onOutput: (_callId, text) => output.write(text),
        onEvent: (event) => pending.push(event),
      },
      { metadata },
    );
    if (yolo) fresh.setYolo(sessionId, true);
    connection = fresh;
    return fresh;
  };

  const run = async (line: ShellLine): Promise<boolean> => {
    switch (line.kind) {
      case 'empty':
        return true;
      case 'quit':
        return false;
      case 'help':
        print(LINE_HELP);
        return true;
      case 'events':
        connect();
        if (pending.length === 0) print('no new events');
        return true;
      case 'error':
        print(`berth: ${line.message}`);
        return true;
      case 'task':
        taskId = line.id;
        return true;
      case 'session':
        sessionId = line.id;
        if (yolo) connect().setYolo(sessionId, true);
        return true;
      case 'yolo':
        yolo = line.enabled;
        connect().setYolo(sessionId, yolo);
        print(`yolo ${yolo ? 'on' : 'off'} for session ${sessionId}`);
        return true;
      case 'call': {
        const conn = connect();
        try {
          const result = await conn.call({ name: line.name, argumentsJson: line.argumentsJson, taskId, sessionId });
          print(`\n${result}`);
        } catch (err) {
          print(`berth: ${options.describeError ? await options.describeError(err) : ((err as Error).message ?? String(err))}`);
          connection = undefined;
          await conn.close().catch(() => undefined);
        }
        return true;
      }
    }
  };

  print(`berth shell — task ${taskId}, session ${sessionId}. /help for help.`);
  try {
    if (input.isTTY === true) {
      const history: string[] = [];
      for (;;) {
        printEvents();
        const line = await readTtyLine(input, output, `berth:${taskId}> `, history);
        if (line === null || !(await run(parseShellLine(line)))) break;
      }
    } else {
      const rl = createInterface({ input, terminal: false });
      for await (const line of rl) {
        printEvents();
        if (!(await run(parseShellLine(line)))) break;
      }
      printEvents();
      rl.close();
    }
  } finally {
    await connection?.close().catch(() => undefined);
  }
  return 0;
}
