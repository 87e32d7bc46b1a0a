/**
 * The one-line errors and exit statuses of the berth command, as a person
 * or a CI script meets them: each names the problem and the fix.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { EXIT, EXIT_TABLE, checkArgumentsJson, exitStatusOfResult, hintFor, toolSummaries } from '../../services/cli/call-outcome.js';
import { COMMAND_HELP, OVERVIEW_HELP } from '../../services/cli/command-help.js';
import { jsonErrorOffset } from '../../services/cli/json-error-offset.js';
import { closestMatch, describeParseError, editDistance } from '../../services/cli/usage.js';
import { listenFailureMessage } from '../../services/common/grpc-server.js';
import { newTaskDirectory, startsInBerthCheckout } from '../../services/cli/task-directory.js';
import { mcpInstructions } from '../../services/cli/mcp-bridge.js';
import { UsageError } from '../../services/cli/usage.js';
import { REPO_ROOT } from '../support/serve-process.js';

function parseError(argv: string[], options: NonNullable<ParseArgsConfig['options']>): Error & { code?: string } {
  try {
    parseArgs({ args: argv, options, strict: true, allowPositionals: true });
  } catch (err) {
    return err as Error & { code?: string };
  }
  throw new Error('parseArgs accepted it');
}

describe('closest matches', () => {
  test('a typo or a prefix finds the name meant; something unlike every name finds none', () => {
    assert.equal(editDistance('serv', 'serve'), 1);
    assert.equal(editDistance('tremrinal', 'terminal'), 2);
    assert.equal(closestMatch('serv', ['serve', 'shell', 'tools']), 'serve');
    assert.equal(closestMatch('terminl', ['terminal', 'patch']), 'terminal');
    assert.equal(closestMatch('check', ['check-command', 'call']), 'check-command');
    assert.equal(closestMatch('frobnicate', ['serve', 'call', 'tools']), undefined);
  });
});

describe('flag errors', () => {
  const serveFlags = { port: { type: 'string' as const }, host: { type: 'string' as const } };
  test('an unknown flag names the command, the closest flag, or the command that has it', () => {
    assert.equal(
      describeParseError('serve', parseError(['--prot', '1'], serveFlags), ['port', 'host', 'help']),
      "unknown flag --prot for 'berth serve'; did you mean '--port'? ('berth serve --help' lists them)",
    );
    assert.equal(
      describeParseError('serve', parseError(['--listen', 'x'], serveFlags), ['port', 'host', 'help'], (f) => (f === 'listen' ? ['mcp'] : [])),
      "unknown flag --listen for 'berth serve'; berth mcp has it ('berth serve --help' lists them)",
    );
  });

  test('a flag without its value says what it needs', () => {
    assert.equal(
      describeParseError('call', parseError(['--task'], { task: { type: 'string' } }), ['task']),
      "--task needs a value, e.g. --task VALUE ('berth call --help' lists them)",
    );
  });
});

describe('ARGS_JSON is checked before anything is sent', () => {
  test('invalid JSON names the character, what precedes it, and the form to use', () => {
    assert.throws(
      () => checkArgumentsJson('terminal', '{"command": "ls"'),
      (err: unknown) =>
        err instanceof UsageError &&
        err.message ===
          `ARGS_JSON is not valid JSON at character 17 (after '{"command": "ls"'): it ends too early; ` +
            `pass one JSON object in single quotes, e.g. berth call terminal '{"name":"value"}'`,
    );
    assert.throws(() => checkArgumentsJson('terminal', '{command:"ls"}'), /at character 2 \(after '\{'\): expected property name or '\}'/);
    assert.throws(() => checkArgumentsJson('terminal', '{"a":1,\n "b":}'), /at line 2, column 6 \(after '\{"a":1,\\n "b":'\): unexpected token '\}'; /);
    for (const [text, offset] of [['{"a":[1,2,]}', 10], ['{"a":tru}', 8], ['{"a":"\\x"}', 7], ['{"a":01}', 6], ['{"a":1}', undefined]] as const) {
      assert.equal(jsonErrorOffset(text), offset, text);
    }
    assert.throws(() => checkArgumentsJson('terminal', '{"command":"ls'), /at character 15 \(after '\{"command":"ls'\): it ends too early/);
    assert.throws(() => checkArgumentsJson('terminal', ''), /at character 1 \(after ''\): it ends too early/);
  });

  test('JSON that is not an object is refused too; an object passes unchanged', () => {
    assert.throws(() => checkArgumentsJson('terminal', '[1]'), /ARGS_JSON must be a JSON object of the tool's arguments, got an array/);
    assert.throws(() => checkArgumentsJson('terminal', '"ls"'), /got a string/);
    assert.deepEqual(checkArgumentsJson('terminal', '{"command":"ls"}'), { command: 'ls' });
  });
});

describe('exit statuses', () => {
  const cases: Array<[string, string, number]> = [
    ['a command that exited 0', '{"output":"","exit_code":0,"error":null}', EXIT.ok],
    ['a command that exited 3', '{"output":"","exit_code":3,"error":null}', EXIT.commandFailed],
    ['a timed-out command', '{"output":"x\\n[Command timed out after 1s]","exit_code":124,"error":null}', EXIT.commandFailed],
    ['a waited-for process that failed', '{"status":"exited","exit_code":2,"output":""}', EXIT.commandFailed],
    ['a process still running', '{"status":"running","exit_code":null}', EXIT.ok],
    ['an unknown tool', '{"error":"Unknown tool: nope"}', EXIT.toolError],
    ['a missing command', '{"output":"","exit_code":-1,"error":"Invalid command: expected string, got NoneType","status":"error"}', EXIT.toolError],
    ['a workdir refusal', '{"output":"","exit_code":-1,"error":"Blocked: workdir contains disallowed character \';\'.","status":"blocked"}', EXIT.toolError],
    ['a patch that missed', '{"success":false,"error":"Could not find a match for old_string in the file"}', EXIT.toolError],
    ['a denied approval', '{"output":"","exit_code":-1,"error":"BLOCKED: User denied this command.","status":"blocked"}', EXIT.denied],
    ['a hardline block', '{"output":"","exit_code":-1,"error":"BLOCKED (hardline): recursive delete of root filesystem.","status":"blocked"}', EXIT.denied],
    ['a script that failed', '{"status":"error","output":"","tool_calls_made":0,"duration_seconds":0.1,"error":"boom"}', EXIT.commandFailed],
    ['a script that ran', '{"status":"success","output":"hi\\n","tool_calls_made":0,"duration_seconds":0.1}', EXIT.ok],
    ['a search with its hint after the JSON', '{"total_count":1,"matches":[]}\n\n[Hint: Results truncated. Use offset=50 to see more]', EXIT.ok],
  ];
  for (const [what, result, status] of cases) {
    test(`${what}: ${status}`, () => assert.equal(exitStatusOfResult(result), status));
  }

  test('the table names every status once, and call --help shows it', () => {
    assert.deepEqual(EXIT_TABLE.map(([code]) => code), [0, 1, 2, 3, 4, 5, 6]);
    for (const [code, meaning] of EXIT_TABLE) assert.ok(COMMAND_HELP.call!.includes(`  ${code}  ${meaning}`));
  });
});

describe('hints beside a failed result', () => {
  const tools = toolSummaries(
    JSON.stringify([
      { type: 'function', function: { name: 'terminal', description: '', parameters: { type: 'object', properties: { command: { type: 'string' } }, required: ['command'] } } },
      { type: 'function', function: { name: 'read_file', description: '', parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] } } },
    ]),
  );
  test('an unknown tool names the closest one', () => {
    assert.equal(hintFor('terminl', {}, '{"error":"Unknown tool: terminl"}', tools), "no tool 'terminl' on this server; did you mean 'terminal'? ('berth tools' lists them)");
    assert.equal(hintFor('nope', {}, '{"error":"Unknown tool: nope"}', tools), "no tool 'nope' on this server ('berth tools' lists them)");
  });

  test('a missing required argument is named, while the result keeps upstream\'s text', () => {
    const upstream = '{"output":"","exit_code":-1,"error":"Invalid command: expected string, got NoneType","status":"error"}';
    assert.equal(hintFor('terminal', {}, upstream, tools), `terminal needs its argument 'command' (string); e.g. berth call terminal '{"command":"..."}'`);
    assert.equal(hintFor('terminal', { command: 'ls' }, '{"error":"something else"}', tools), undefined);
  });
});

describe('help', () => {
  test('every command has its own help with its synopsis and an example, and the overview lists them all', () => {
    for (const [command, help] of Object.entries(COMMAND_HELP)) {
      assert.match(help, new RegExp(`^Usage: berth ${command}\\b`), command);
      assert.match(help, /\nExample/, `${command} --help has an example`);
      assert.ok(OVERVIEW_HELP.includes(`  ${command} `), `the overview lists ${command}`);
    }
    assert.match(COMMAND_HELP.mcp!, /\[--server ADDR\]/);
    assert.doesNotMatch(COMMAND_HELP.mcp!, /Client options \(tools, call, shell\)/);
  });
});

describe('where things start and what they say', () => {
  test('a port in use, a port that needs root, an address the host lacks: each one line with the fix', () => {
    const subject = { name: 'the Dispatcher API', portSetting: '--port N (server.port, BERTH_PORT)' };
    assert.equal(
      listenFailureMessage(subject, '127.0.0.1:7700', new Error('No address added out of total 1 resolved errors: [listen EADDRINUSE: address already in use 127.0.0.1:7700]')),
      'cannot serve the Dispatcher API on 127.0.0.1:7700: the port is in use by another process (another berth?); stop it, or choose another port with --port N (server.port, BERTH_PORT)',
    );
    assert.match(listenFailureMessage(subject, '127.0.0.1:80', new Error('[listen EACCES: permission denied]')), /ports below 1024 need root/);
    assert.match(listenFailureMessage(subject, '10.9.9.9:7700', new Error('[listen EADDRNOTAVAIL]')), /no such address on this host/);
  });

  test('new local tasks start in terminal.cwd, else the launch directory; in the checkout that is said', () => {
    const local = { backend: 'local' as const, cwd: '', ssh_host: '' };
    assert.equal(newTaskDirectory(local, '/home/you/project'), '/home/you/project');
    assert.equal(newTaskDirectory({ ...local, cwd: '/srv/work' }, '/home/you'), '/srv/work');
    assert.equal(newTaskDirectory({ ...local, backend: 'docker' }, '/x'), "/workspace, in each task's sandbox");
    assert.equal(startsInBerthCheckout(local, REPO_ROOT, REPO_ROOT), true);
    assert.equal(startsInBerthCheckout(local, `${REPO_ROOT}/services`, REPO_ROOT), true);
    assert.equal(startsInBerthCheckout({ ...local, cwd: '/tmp' }, REPO_ROOT, REPO_ROOT), false);
    assert.equal(startsInBerthCheckout({ ...local, backend: 'docker' }, REPO_ROOT, REPO_ROOT), false);
  });

  test('MCP instructions claim a sandbox only where the backend gives one', () => {
    assert.match(mcpInstructions('t', 'local'), /directly on the server's machine, as its user, with no sandbox/);
    assert.doesNotMatch(mcpInstructions('t', 'local'), /sandboxed/);
    assert.match(mcpInstructions('t', 'docker'), /in a docker sandbox of its own/);
    assert.match(mcpInstructions('t', undefined), /Whether they run in a sandbox depends on the Berth server's backend/);
  });
});
