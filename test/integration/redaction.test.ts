/**
 * Secret masking of tool results as a model sees them, over a real local
 * backend: terminal output, process_manage output and commands, read_file
 * content and search_files matches, each with `security.redact_secrets` on
 * (the default) and off. The fake credentials are assembled at run time.
 */
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, it } from 'node:test';
import { parseConfig } from '../../services/common/config-load.js';
import { silentLogger } from '../../services/common/logging.js';
import type { TaskClient, TaskCodeRunRequest } from '../../services/common/task-client.js';
import { ToolRegistry } from '../../services/dispatcher/registry/registry.js';
import { registerBuiltinTools } from '../../services/dispatcher/tools/builtin-tools.js';
import type { ToolRegistration } from '../../services/dispatcher/registry/tool-types.js';
import { fileToolRegistrations } from '../../services/dispatcher/tools/file-tools.js';
import { processToolRegistration } from '../../services/dispatcher/tools/process-tool.js';
import { terminalToolRegistration } from '../../services/dispatcher/tools/terminal/terminal-tool.js';
import { localToolTasks, toolContextOf } from '../support/tool-tasks.js';

type Json = Record<string, unknown>;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const OPENAI_KEY = 'sk-' + 'a'.repeat(40);
const OPENAI_MASK = 'sk-aaa...aaaa';
const GITHUB_KEY = 'ghp_' + 'B7'.repeat(18);
const OPAQUE = 'q7W'.repeat(8);

const tasks = localToolTasks('redaction', async (root) => {
  await writeFile(path.join(root, 'notes.txt'), `deploy key: ${GITHUB_KEY}\nnothing else\n`);
  await writeFile(path.join(root, '.env'), `DB_PASSWORD=${OPAQUE}\nMAX_TOKENS=100\n`);
  await writeFile(path.join(root, 'settings.txt'), `DB_PASSWORD=${OPAQUE}\n`);
});

/** One task with the four tools registered as builtin-tools registers them, redaction on or off. */
function task(redactSecrets: boolean) {
  const { context } = tasks.newTask();
  const tools = new Map<string, ToolRegistration>(
    [
      terminalToolRegistration({ redactSecrets }),
      processToolRegistration({ redactSecrets }),
      ...fileToolRegistrations({ redactSecrets }),
    ].map((reg) => [reg.name, reg]),
  );
  return async (name: string, args: Json): Promise<Json> => {
    return JSON.parse(await tools.get(name)!.handler(args, context)) as Json;
  };
}

/** Polls a background process until its preview holds `text`. */
async function pollUntil(call: ReturnType<typeof task>, sessionId: string, text: string): Promise<Json> {
  let polled: Json = {};
  for (let i = 0; i < 100; i++) {
    polled = await call('process_manage', { action: 'poll', session_id: sessionId });
    if (String(polled.output_preview).includes(text)) return polled;
    await sleep(50);
  }
  return polled;
}

describe('secret redaction of tool results (local backend)', () => {
  it('terminal: a key echoed or printed from a file comes back masked', async () => {
    const call = task(true);
    const echoed = await call('terminal', { command: `echo "key=${OPENAI_KEY}"` });
    assert.equal(echoed.output, `key=${OPENAI_MASK}`);
    const cat = await call('terminal', { command: 'cat notes.txt' });
    assert.equal(cat.output, `deploy key: ${GITHUB_KEY.slice(0, 6)}...${GITHUB_KEY.slice(-4)}\nnothing else`);
  });

  it('terminal: assignments are masked for env dumps and .env reads, kept for other files', async () => {
    const call = task(true);
    const dump = await call('terminal', { command: `export MY_SERVICE_TOKEN=${OPAQUE}; env | grep MY_SERVICE_TOKEN` });
    assert.equal(dump.output, 'MY_SERVICE_TOKEN=***');
    assert.equal((await call('terminal', { command: 'cat .env' })).output, 'DB_PASSWORD=***\nMAX_TOKENS=100');
    assert.equal((await call('terminal', { command: 'cat settings.txt' })).output, `DB_PASSWORD=${OPAQUE}`);
  });

  it('read_file: content gets the non-reusable sentinel; a .env file its assignments masked too', async () => {
    const call = task(true);
    const notes = await call('read_file', { path: 'notes.txt' });
    assert.equal(notes.content, '1|deploy key: «redacted:ghp_…»\n2|nothing else');
    const env = await call('read_file', { path: '.env' });
    assert.equal(env.content, '1|DB_PASSWORD=«redacted-secret»\n2|MAX_TOKENS=100');
    const settings = await call('read_file', { path: 'settings.txt' });
    assert.equal(settings.content, `1|DB_PASSWORD=${OPAQUE}`);
  });

  it('search_files: match content is masked', async () => {
    const call = task(true);
    const found = await call('search_files', { pattern: 'deploy key', path: '.' });
    assert.deepEqual(found.matches, [{ path: 'notes.txt', line: 1, content: 'deploy key: «redacted:ghp_…»' }]);
  });

  it('process_manage: poll output_preview, log output and the command are masked', async () => {
    const call = task(true);
    const started = await call('terminal', { command: `echo ${OPENAI_KEY}; sleep 1000`, background: true });
    const id = String(started.session_id);
    const polled = await pollUntil(call, id, 'sk-');
    assert.equal(polled.output_preview, `${OPENAI_MASK}\n`);
    assert.equal(polled.command, `echo ${OPENAI_MASK}; sleep 1000`);
    const log = await call('process_manage', { action: 'log', session_id: id });
    assert.equal(log.output, OPENAI_MASK);
    const listed = (await call('process_manage', { action: 'list' })).processes as Json[];
    assert.deepEqual(
      listed.map((p) => [p.command, p.output_preview]),
      [[`echo ${OPENAI_MASK}; sleep 1000`, `${OPENAI_MASK}\n`]],
    );
    const killed = await call('process_manage', { action: 'kill', session_id: id });
    assert.equal(killed.output, `${OPENAI_MASK}\n`);
  });

  it('with security.redact_secrets off nothing is masked', async () => {
    const call = task(false);
    assert.equal((await call('terminal', { command: `echo "key=${OPENAI_KEY}"` })).output, `key=${OPENAI_KEY}`);
    assert.equal((await call('terminal', { command: 'cat .env' })).output, `DB_PASSWORD=${OPAQUE}\nMAX_TOKENS=100`);
    assert.equal((await call('read_file', { path: 'notes.txt' })).content, `1|deploy key: ${GITHUB_KEY}\n2|nothing else`);
    const found = await call('search_files', { pattern: 'deploy key', path: '.' });
    assert.deepEqual(found.matches, [{ path: 'notes.txt', line: 1, content: `deploy key: ${GITHUB_KEY}` }]);
    const started = await call('terminal', { command: `echo ${OPENAI_KEY}; sleep 1000`, background: true });
    const polled = await pollUntil(call, String(started.session_id), 'sk-');
    assert.deepEqual([polled.command, polled.output_preview], [`echo ${OPENAI_KEY}; sleep 1000`, `${OPENAI_KEY}\n`]);
    await call('process_manage', { action: 'kill', session_id: String(started.session_id) });
  });

  it('execute_code: tool calls of a script and its printed output are masked through the registry', async () => {
    const registry = new ToolRegistry({ logger: silentLogger() });
    registerBuiltinTools(registry, parseConfig({}));
    const { key, context: plain } = tasks.newTask();
    const answers: string[] = [];
    // The script runner is stood in for: it makes the calls a hermes_tools script would and prints a key.
    const client: TaskClient = {
      ...plain.task,
      runCode: async (request: TaskCodeRunRequest) => {
        answers.push(await request.onToolCall({ tool: 'terminal', argsJson: JSON.stringify({ command: `echo ${OPENAI_KEY}` }) }));
        answers.push(await request.onToolCall({ tool: 'read_file', argsJson: JSON.stringify({ path: 'notes.txt' }) }));
        return {
          stdout: `printed ${OPENAI_KEY}\n`,
          stderr: '',
          exitCode: 0,
          timedOut: false,
          interrupted: false,
          ranIn: 'test',
          interpreter: 'python3',
          notices: [],
        };
      },
    };
    const result = JSON.parse(await registry.dispatch('execute_code', { code: 'print(1)' }, toolContextOf(key, client))) as Json;
    assert.equal(result.output, `printed ${OPENAI_MASK}\n`);
    assert.equal((JSON.parse(answers[0] ?? '{}') as Json).output, OPENAI_MASK);
    assert.equal((JSON.parse(answers[1] ?? '{}') as Json).content, '1|deploy key: «redacted:ghp_…»\n2|nothing else');
  });
});
