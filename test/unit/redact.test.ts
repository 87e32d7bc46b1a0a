/**
 * Secret redaction (services/dispatcher/redaction), family by family, with
 * upstream hermes-agent's masks (agent/redact.py): 6 head + `...` + 4 tail for
 * 18+ characters, `***` below, the `«redacted:…»` sentinel for file content.
 * Every fake credential is assembled at run time, so no secret-looking literal
 * sits in the repository.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  commandReadsSecretFile,
  isEnvDumpCommand,
  isSecretFilePath,
  redactFileContent,
  redactProcessEvent,
  redactProcessResult,
  redactTerminalOutput,
} from '../../services/dispatcher/redaction/output-redaction.js';
import { maskToken, redactSensitiveText as redact } from '../../services/dispatcher/redaction/redact.js';

/** A fake credential: `prefix` then `length` characters cycling through `body`. */
function fake(prefix: string, length: number, body = 'aB3'): string {
  return prefix + body.repeat(Math.ceil(length / body.length)).slice(0, length);
}

/** The upstream display mask of a token of 18+ characters. */
function masked(token: string): string {
  return `${token.slice(0, 6)}...${token.slice(-4)}`;
}

const DASHES = '-----';
const pemBlock = (body: string): string =>
  `${DASHES}BEGIN RSA PRIVATE KEY${DASHES}\n${body}\n${DASHES}END RSA PRIVATE KEY${DASHES}`;

describe('redaction: vendor-prefixed keys', () => {
  const tokens = [
    fake('sk-', 40),
    fake('sk-proj-', 40),
    fake('ghp_', 36),
    fake('github_pat_', 40),
    fake('gho_', 30),
    fake('xoxb-', 30, '12-ab'),
    fake('xapp-1-', 30, 'A1b'),
    fake('AIza', 35),
    fake('AKIA', 16, 'A7Z'),
    fake('sk_live_', 24),
    fake('SG.', 30),
    fake('hf_', 30),
    fake('npm_', 30),
    fake('pypi-', 30),
    fake('glpat-', 20),
    fake('xai-', 40),
    fake('gAAAA', 40),
    fake('pk-lf-', 20),
    fake('am_', 24),
  ];

  test('each family is masked, 6 head and 4 tail kept', () => {
    for (const token of tokens) {
      assert.equal(redact(`key: ${token} done`), `key: ${masked(token)} done`, token.slice(0, 6));
    }
  });

  test('file content gets the non-reusable sentinel with the vendor label', () => {
    assert.equal(redact(`x ${fake('ghp_', 36)} y`, { fileRead: true }), 'x «redacted:ghp_…» y');
    assert.equal(redact(fake('sk_live_', 24), { fileRead: true }), '«redacted:sk_live_…»');
    assert.equal(redact(fake('SG.', 30), { fileRead: true }), '«redacted:SG…»');
  });

  test('a token split by a control or zero-width character is still masked', () => {
    const token = fake('ghp_', 36);
    const split = `${token.slice(0, 10)}\u200b${token.slice(10)}`;
    assert.equal(redact(`t=${split}`), `t=${masked(token)}`);
  });

  test('a second pass leaves a mask alone', () => {
    const once = redact(fake('sk-', 40));
    assert.equal(redact(once), once);
  });

  test('near misses stay: words, short bodies, identifiers, hashes', () => {
    for (const text of [
      'skeleton task-runner sk-short ghp_short',
      'mysk-aaaaaaaaaaaaaaaaaaaa', // preceded by a token character
      `commit ${'3f786850e387550fdab836ed7e6dc881de23001b'}`, // a git SHA
      '550e8400-e29b-41d4-a716-446655440000',
      'AKIA-not-a-key',
      'eyJshort',
      'call +123 now',
    ]) {
      assert.equal(redact(text), text);
      assert.equal(redact(text, { fileRead: true }), text);
    }
  });
});

describe('redaction: assignments (env dumps and secret-bearing files only)', () => {
  test('uppercase env assignments with a secret name', () => {
    const value = fake('', 24, 'q7W');
    // The uppercase pass masks head...tail; upstream's case-insensitive `_NAME=` pass then sees an opaque
    // 13-character value and masks it again, so an env dump shows ***.
    assert.equal(redact(`MY_SERVICE_TOKEN=${value}`), 'MY_SERVICE_TOKEN=***');
    // A name inside a word does not count, in capitals too (upstream's word-boundary check).
    assert.equal(redact(`MYTOKEN=${value}`), `MYTOKEN=${value}`);
    assert.equal(redact(`DB_PASSWORD=hunter2`), 'DB_PASSWORD=***');
    assert.equal(redact(`export GITHUB_TOKEN="${value}"`), 'export GITHUB_TOKEN="***"');
    // With a URL in the text the lowercase pass is skipped, as upstream (URL query parameters pass).
    assert.equal(redact(`SERVICE_TOKEN=${value} https://x.test/`), `SERVICE_TOKEN=${masked(value)} https://x.test/`);
  });

  test('a key value already masked by its prefix is masked again under a password-class key', () => {
    assert.equal(redact(`OPENAI_API_KEY=${fake('sk-', 40)}`), 'OPENAI_API_KEY=***');
  });

  test('lowercase identifiers, dotted config keys, line-start keys, YAML, JSON and Python reprs', () => {
    const value = fake('', 24, 'q7W');
    assert.equal(redact(`run openai_api_key=${value}`), `run openai_api_key=${masked(value)}`);
    assert.equal(redact(`spring.datasource.password=${value}`), `spring.datasource.password=${masked(value)}`);
    assert.equal(redact(`password=${value}`), `password=${masked(value)}`);
    assert.equal(redact(`  api_key: ${value}`), `  api_key: ${masked(value)}`);
    assert.equal(redact(`{"api_key": "${value}"}`), `{"api_key": "${masked(value)}"}`);
    assert.equal(redact(`{\\"token\\": \\"${value}\\"}`), `{\\"token\\": \\"${masked(value)}\\"}`);
    assert.equal(redact(`{'BRAVE_API_KEY': '${value}'}`), "{'BRAVE_API_KEY': '***'}");
  });

  test('non-secrets under secret-looking names stay', () => {
    for (const text of [
      'MAX_TOKENS=100',
      'KEYBOARD=us',
      'SSH_AUTH_SOCK=/tmp/ssh-abc/agent.123',
      'GITHUB_TOKEN=os.getenv("GITHUB_TOKEN")',
      'secretary: J.Smith',
      'tokenizer: cl100k_base',
      'I have password=foo in a sentence',
      '{"token": "abc"}',
      'author=Smith',
    ]) {
      assert.equal(redact(text), text, text);
    }
  });

  test('source code and ordinary file content skip the assignment passes', () => {
    const value = fake('', 24, 'q7W');
    for (const text of [`MY_SERVICE_TOKEN=${value}`, `{"apiKey": "${value}"}`, `api_key: ${value}`]) {
      assert.equal(redact(text, { codeFile: true }), text);
      assert.equal(redact(text, { fileRead: true }), text);
    }
  });

  test('a secret-bearing file read gets the assignment passes with the sentinel, gutter and key kept', () => {
    const value = fake('', 24, 'q7W');
    assert.equal(
      redact(`5|ADS_API_TOKEN: ${value}`, { fileRead: true, secretFile: true }),
      '5|ADS_API_TOKEN: «redacted-secret»',
    );
    assert.equal(redact(`1|DB_PASSWORD=${value}`, { fileRead: true, secretFile: true }), '1|DB_PASSWORD=«redacted-secret»');
    assert.equal(redactFileContent(`1|DB_PASSWORD=${value}`, '/w/.env'), '1|DB_PASSWORD=«redacted-secret»');
    assert.equal(redactFileContent(`1|DB_PASSWORD=${value}`, '/w/settings.py'), `1|DB_PASSWORD=${value}`);
  });
});

describe('redaction: headers, keys, URLs', () => {
  const credential = fake('', 30, 'x9Y');

  test('Authorization keeps its scheme; API-key headers keep their name', () => {
    assert.equal(redact(`Authorization: Bearer ${credential}`), `Authorization: Bearer ${masked(credential)}`);
    assert.equal(redact(`proxy-authorization: Basic ${credential}`), `proxy-authorization: Basic ${masked(credential)}`);
    assert.equal(redact(`X-Auth-Token: ${credential}`, { codeFile: true }), `X-Auth-Token: ${masked(credential)}`);
    assert.equal(redact('Authorization: short', { codeFile: true }), 'Authorization: ***');
  });

  test('Telegram bot tokens keep the bot id', () => {
    assert.equal(redact(`bot123456789:${credential}`), 'bot123456789:***');
  });

  test('private-key blocks become one marker; an unterminated header stays', () => {
    assert.equal(redact(`a\n${pemBlock('MIIEow\nAAAA')}\nb`), 'a\n[REDACTED PRIVATE KEY]\nb');
    const header = `${DASHES}BEGIN RSA PRIVATE KEY${DASHES}\nno footer`;
    assert.equal(redact(header), header);
  });

  test('connection-string passwords; f-string templates in code survive', () => {
    assert.equal(redact('postgres://app:hunter2@db:5432/x'), 'postgres://app:***@db:5432/x');
    assert.equal(redact('mongodb+srv://u:p4ss@cluster/x', { fileRead: true }), 'mongodb+srv://u:***@cluster/x');
    const template = 'f"postgresql://{user}:{password}@{host}"';
    assert.equal(redact(template, { codeFile: true }), template);
    assert.equal(redact('postgres://app:5432/x'), 'postgres://app:5432/x');
  });

  test('a bare token in URL userinfo is masked; user:pass@ in a web URL and query strings pass', () => {
    assert.equal(redact(`https://${credential}@github.com/o/r`), `https://${masked(credential)}@github.com/o/r`);
    assert.equal(redact('https://user:pw@example.com/x?token=abc'), 'https://user:pw@example.com/x?token=abc');
  });

  test('JWTs, form bodies and phone numbers', () => {
    const jwt = `eyJ${fake('', 20)}.${fake('', 20)}.${fake('', 20)}`;
    assert.equal(redact(`jwt ${jwt}`), `jwt ${masked(jwt)}`);
    assert.equal(redact('grant_type=password&password=hunter2&user=x'), 'grant_type=password&password=***&user=x');
    assert.equal(redact('call +14155552671 now'), 'call +141****2671 now');
  });

  test('maskToken: empty and short values become ***', () => {
    assert.equal(maskToken(''), '***');
    assert.equal(maskToken('a'.repeat(17)), '***');
    assert.equal(maskToken('a'.repeat(18)), 'aaaaaa...aaaa');
  });
});

describe('redaction: terminal and process policy', () => {
  const value = fake('', 24, 'q7W');

  test('env dumps and secret-file reads get the assignment pass; other commands keep KEY=value', () => {
    const dump = `MY_TOKEN=${value}\nMAX_TOKENS=100`;
    assert.equal(redactTerminalOutput(dump, 'printenv'), 'MY_TOKEN=***\nMAX_TOKENS=100');
    assert.equal(redactTerminalOutput(dump, 'cd /x && env | sort'), 'MY_TOKEN=***\nMAX_TOKENS=100');
    assert.equal(redactTerminalOutput(dump, 'cat .env'), 'MY_TOKEN=***\nMAX_TOKENS=100');
    assert.equal(redactTerminalOutput(dump, 'cat config.py'), dump);
    assert.equal(redactTerminalOutput(`key ${fake('sk-', 40)}`, 'cat config.py'), `key ${masked(fake('sk-', 40))}`);
  });

  test('Python diagnostic lines get the repr pass in source-preserving output', () => {
    const line = `E       AssertionError: {'BRAVE_API_KEY': '${value}'}`;
    assert.equal(redactTerminalOutput(line, 'pytest'), "E       AssertionError: {'BRAVE_API_KEY': '***'}");
    const source = `config = {'BRAVE_API_KEY': '${value}'}`;
    assert.equal(redactTerminalOutput(source, 'cat app.py'), source);
  });

  test('command classification', () => {
    assert.equal(isEnvDumpCommand('env'), true);
    assert.equal(isEnvDumpCommand('"printenv"'), true);
    assert.equal(isEnvDumpCommand("echo 'a|env'"), false);
    assert.equal(isEnvDumpCommand('ls -la'), false);
    assert.equal(commandReadsSecretFile('grep TOKEN ~/.bashrc'), true);
    assert.equal(commandReadsSecretFile('grep .bashrc app.py'), false);
    assert.equal(commandReadsSecretFile('cat ~/.hermes/config.yaml'), true);
    assert.equal(commandReadsSecretFile('cat config.yaml'), false);
    assert.equal(isSecretFilePath('/srv/app/.env.production'), true);
    assert.equal(isSecretFilePath('/srv/app/.env.example'), false);
  });

  test('process results: output, output_preview and command of output actions and list entries', () => {
    const token = fake('ghp_', 36);
    const poll = JSON.stringify({ session_id: 'proc_1', command: `echo ${token}`, status: 'running', output_preview: token });
    assert.deepEqual(JSON.parse(redactProcessResult('poll', poll)), {
      session_id: 'proc_1',
      command: `echo ${masked(token)}`,
      status: 'running',
      output_preview: masked(token),
    });
    const list = JSON.stringify({ processes: [{ session_id: 'proc_1', command: 'printenv', output_preview: `A_TOKEN=${value}` }] });
    assert.equal(
      (JSON.parse(redactProcessResult('list', list)) as { processes: Array<{ output_preview: string }> }).processes[0]?.output_preview,
      'A_TOKEN=***',
    );
    const written = JSON.stringify({ status: 'ok', bytes_written: 3 });
    assert.equal(redactProcessResult('write', written), written);
    assert.equal(redactProcessResult('poll', 'not json'), 'not json');
  });

  test('process events: output by the command, then the command; summaries pass unchanged', () => {
    const token = fake('ghp_', 36);
    const base = { session_id: 'proc_1', task_id: 't', owner_task_id: 't', command: `deploy --token ${token}` };
    const match = redactProcessEvent({ ...base, type: 'watch_match', pattern: 'ok', output: `ok ${token}`, suppressed: 0 });
    assert.deepEqual([match.command, match.output], [`deploy --token ${masked(token)}`, `ok ${masked(token)}`]);
    const dump = redactProcessEvent({ ...base, command: 'printenv', type: 'heartbeat', seq: 1, interval: 60, elapsed: 61, output: `A_TOKEN=${value}`, started_at: 1 });
    assert.equal(dump.output, 'A_TOKEN=***');
    const summary = { session_id: '', command: '', type: 'watch_overflow_tripped', message: 'm' } as const;
    assert.deepEqual(redactProcessEvent(summary), summary);
  });
});

describe('redaction: hostile input', () => {
  // Each input would make a backtracking pattern scan the rest of the text from every start; the pass must still
  // answer, and with the right result.
  const mb = 1_000_000;
  // [name, text, expected result (undefined: unchanged), expected as file content (undefined: unchanged)]
  const cases: Array<readonly [string, string, string | undefined, string?]> = [
    ['uppercase run', 'A'.repeat(mb), undefined],
    ['secret names without =', 'TOKEN'.repeat(mb / 5), undefined],
    // `-` is a body character of sk- keys, so the whole run is one key.
    ['prefix repeated', 'sk-'.repeat(mb / 3), 'sk-sk-...-sk-', '«redacted:sk-…»'],
    ['prefix then a blocked tail', ` ghp_${'a'.repeat(mb)}_`, undefined],
    ['unterminated repr strings', "'k': '\\'".repeat(mb / 8), undefined],
    ['connection strings without @', 'postgres://u:'.repeat(mb / 13), undefined],
    ['private-key headers without a footer', `${DASHES}BEGIN RSA PRIVATE KEY${DASHES}`.repeat(mb / 31), undefined],
    ['escaped JSON keys without values', ' \\"token\\": \\"'.repeat(mb / 14), undefined],
    ['digits without a colon', '1'.repeat(mb), undefined],
    // Each header's credential is the next header's name (no quotes or spaces in it), as upstream reads it.
    ['Authorization headers', 'Authorization: '.repeat(66_666), 'Authorization: *** '.repeat(33_333), 'Authorization: *** '.repeat(33_333)],
    ['line-start keys without =', `${'token'.repeat(mb / 5)}\n`, undefined],
    ['variable references', '$a'.repeat(mb / 2), undefined],
    ['one long assignment', 'A_KEY='.repeat(mb / 6), `A_KEY=A_KEY=...KEY=`],
  ];
  for (const [name, text, expected, expectedFile] of cases) {
    test(`${name}: 1 MB`, () => {
      // Compared as booleans first so a failure does not print a megabyte.
      const plain = redact(text);
      assert.ok(plain === (expected ?? text), `${name}: ${plain.slice(0, 80)}`);
      const file = redact(text, { fileRead: true });
      assert.ok(file === (expectedFile ?? text), `${name} (file): ${file.slice(0, 80)}`);
      assert.ok(redactTerminalOutput(text, 'env') === plain, `${name} (env dump)`);
    });
  }
});
