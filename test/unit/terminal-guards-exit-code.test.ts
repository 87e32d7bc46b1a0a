import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { exitCodeMeaning } from '../../services/dispatcher/tools/terminal/guards/exit-code-meaning.js';

void describe('exitCodeMeaning', () => {
  const noMatches = 'No matches found (not an error)';
  const differ = 'Files differ (expected, not an error)';
  const isFalse = 'Condition evaluated to false (expected, not an error)';
  const git = "Non-zero exit (often normal — e.g. 'git diff' returns 1 when files differ)";
  const cases: [command: string, exitCode: number, meaning: string | undefined][] = [
    ['grep foo file.txt', 1, noMatches],
    ['rg TODO src', 1, noMatches],
    ['ag TODO', 1, noMatches],
    ['ack TODO', 1, noMatches],
    ['egrep -r x .', 1, noMatches],
    ['fgrep x f', 1, noMatches],
    ['/usr/bin/grep x f', 1, noMatches],
    ['cat log | grep ERROR', 1, noMatches],
    ['cd src && grep -rn foo .', 1, noMatches],
    ['sudo grep x /etc/shadow', 1, noMatches],
    ['LC_ALL=C grep x f', 1, noMatches],
    ['grep x $(ls *.txt)', 1, noMatches],
    ['diff a.txt b.txt', 1, differ],
    ['colordiff a b', 1, differ],
    ['diff <(sort a) <(sort b)', 1, differ],
    ['cmp a b', 1, differ],
    ['find / -name core', 1, 'Some directories were inaccessible (partial results may still be valid)'],
    ['test -f missing', 1, isFalse],
    ['[ -d /nope ]', 1, isFalse],
    ['[[ $x == y ]]', 1, isFalse],
    ['curl https://nowhere.invalid', 6, 'Could not resolve host'],
    ['curl http://localhost:9', 7, 'Failed to connect to host'],
    ['curl -f http://x/404', 22, 'HTTP response code indicated error (e.g. 404, 500)'],
    ['curl -m 1 http://slow', 28, 'Operation timed out'],
    ['git diff --exit-code', 1, git],
    ['git grep foo', 1, git],
    ['git commit -m wip', 1, git],
    ['python train.py', 137, 'Exit code 137 usually means the command was terminated by signal 9: SIGKILL — often the kernel OOM killer on memory exhaustion, or an explicit kill -9'],
    ['./crash', 139, 'Exit code 139 usually means the command was terminated by signal 11: SIGSEGV (segmentation fault — the program crashed)'],
    ['yes | head -1', 141, 'Exit code 141 usually means the command was terminated by signal 13: SIGPIPE (wrote to a closed pipe — e.g. output piped to a reader that exited)'],
    ['grep x f', 143, 'Exit code 143 usually means the command was terminated by signal 15: SIGTERM (terminated — kill/timeout or shutdown requested it to stop)'],
    ['./app', -9, 'Command terminated by signal 9: SIGKILL — often the kernel OOM killer on memory exhaustion, or an explicit kill -9'],
    ['./app', -1, 'Command terminated by SIGHUP (signal 1)'],
    ['./app', -10, 'Command terminated by SIGUSR1 (signal 10)'],
    ['./app', -2, undefined],
    ['./app', 130, undefined],
    ['./app', 129, undefined],
    ['grep x f', 0, undefined],
    ['grep x f', 2, undefined],
    ['curl http://x', 1, undefined],
    ['grep x f | wc -l', 1, undefined],
    ['! grep x f', 1, undefined],
    ['ls missing', 1, undefined],
    ['grep x f; ls', 1, undefined],
    ['echo "grep" x', 1, undefined],
  ];
  for (const [command, exitCode, meaning] of cases) {
    void it(`${JSON.stringify(command)} exit ${exitCode} → ${meaning ?? 'nothing'}`, () => {
      assert.equal(exitCodeMeaning(command, exitCode), meaning);
    });
  }
});
