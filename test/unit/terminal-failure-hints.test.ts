import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { failureHint, maskedSuccessHint } from '../../services/dispatcher/tools/terminal/guards/failure-hints.js';

const PIPE_WARNING =
  'exit_code 0 here is the status of the last pipeline command (tail/head/cat/...), NOT of the command before the ' +
  'pipe — and the output contains failure indicators. Treat this run as FAILED until proven otherwise: re-run the ' +
  'command WITHOUT the pipe (output is auto-truncated and the full text is saved to a file, so piping through ' +
  'tail/head is never needed) to get the real exit code.';
const FALLBACK_WARNING =
  'exit_code 0 here is the status of the `||` fallback (echo/true), NOT of the command before it — and the output ' +
  'contains failure indicators. Treat this run as FAILED until proven otherwise: re-run the command bare to get its ' +
  'real exit code.';
const PERMISSION =
  'Permission denied. Check ownership/mode of the target path (`ls -la`); prefer a user-writable location. Only ' +
  'escalate to sudo if the task genuinely requires it.';
const PAYLOAD =
  'The generated source contains a character that cannot appear in code position — typographic punctuation, or a ' +
  'payload quote closing the literal that carries it — so the same source will fail again. Leave the payload text ' +
  'alone: write it to a file with write_file and pass the file (`gh ... --body-file <file>`, `gh api -F ' +
  'body=@<file>`, `open(path).read()`); a character that is merely stray in the generated code may be swapped for ' +
  'ASCII.';

void describe('failureHint', () => {
  void it('gives the reference texts for each output shape', () => {
    const cases: [string, string][] = [
      [
        'Unknown JSON field: "mergeStateStatus"\nAvailable fields: ...',
        "The installed gh does not support the JSON field 'mergeStateStatus'. The valid field list is printed in the " +
          'output above — retry using only fields from that list.',
      ],
      [
        'Auto-merging a.py\nCONFLICT (content): Merge conflict in a.py',
        'Git merge conflict. Do not retry this command. Resolve the conflicted files listed above (edit, then ' +
          '`git add`), then continue (`git rebase --continue` / commit the merge) — or abort with `--abort`.',
      ],
      [
        'bash: pip: command not found',
        "This system has no bare `pip` — use `pip3`, `python3 -m pip`, or the project venv's pip (e.g. .venv/bin/pip).",
      ],
      [
        'sh: 1: rg: command not found',
        '`rg` is not installed or not on PATH. Verify with `which rg`; install it or use an absolute path instead of ' +
          'retrying the same command.',
      ],
      [
        "Traceback (most recent call last):\nModuleNotFoundError: No module named 'requests.adapters'",
        "Python cannot import 'requests.adapters'. Most often the wrong interpreter is running: activate the project " +
          'venv (e.g. `source .venv/bin/activate`) or invoke its python directly. Only pip install if the package is ' +
          'genuinely absent from that venv.',
      ],
      [
        "fatal: destination path 'repo' already exists and is not an empty directory.",
        "'repo' already exists — retrying unchanged will keep failing. Reuse it, choose another name, or delete it " +
          'first if it is genuinely stale.',
      ],
      [
        'HTTP 403: API rate limit exceeded for user',
        'GitHub API rate limit hit — immediate retries will keep failing. Continue with other work and retry this ' +
          'operation later.',
      ],
      ['mkdir: cannot create directory /opt/x: Permission denied', PERMISSION],
      ['  File "x.py", line 1\nSyntaxError: invalid character \'“\' (U+201C)', PAYLOAD],
      ['bash: -c: line 1: unexpected EOF while looking for matching `\'\'', PAYLOAD],
      ['zsh:1: unmatched "', PAYLOAD],
    ];
    for (const [output, hint] of cases) assert.equal(failureHint(1, output), hint, output);
  });

  void it('takes the first pattern in the reference order when several match', () => {
    assert.match(failureHint(1, 'CONFLICT (content): x\npython: command not found') ?? '', /^Git merge conflict/);
  });

  void it('needs CONFLICT at the start of a line', () => {
    assert.equal(failureHint(1, 'no CONFLICT here'), undefined);
  });

  void it('falls back to the exit code when no output shape matches', () => {
    assert.equal(
      failureHint(126, ''),
      'Exit 126: the file was found but is not executable — `chmod +x` it or invoke it via its interpreter (e.g. ' +
        '`bash script.sh`).',
    );
    assert.equal(
      failureHint(137, 'unrelated'),
      'Exit 137: the process was SIGKILLed — usually out-of-memory or an external kill. Reduce memory use or check ' +
        '`dmesg | tail` before retrying.',
    );
    assert.equal(
      failureHint(124, '[Command timed out after 5s]'),
      'Exit 124: the command hit its timeout. Raise timeout= (foreground max 600s) or run it with background=true ' +
        'and notify_on_complete=true.',
    );
    assert.equal(failureHint(2, 'unrelated'), undefined);
  });

  void it('never hints for exit code 0', () => {
    assert.equal(failureHint(0, 'Permission denied'), undefined);
  });

  void it('scans only the first 4,000 characters, counted as code points', () => {
    assert.equal(failureHint(1, `${'x'.repeat(4000)}Permission denied`), undefined);
    assert.equal(failureHint(1, `${'x'.repeat(3983)}Permission denied`), PERMISSION);
    // 3,983 astral characters are 7,966 UTF-16 units but 3,983 characters, as Python counts.
    assert.equal(failureHint(1, `${'😀'.repeat(3983)}Permission denied`), PERMISSION);
  });

  void it('reads Unicode letters as word characters, as Python does', () => {
    assert.match(failureHint(127, 'bash: größe: command not found') ?? '', /^`größe` is not installed/);
  });
});

void describe('maskedSuccessHint', () => {
  void it('warns for a pipe consumer or an || fallback when the output has a failure shape', () => {
    assert.equal(maskedSuccessHint('cargo build 2>&1 | tail -20', 'error[E0308]: mismatched types'), PIPE_WARNING);
    assert.equal(maskedSuccessHint('pytest || echo FAILED', '==== 2 failed, 10 passed ===='), FALLBACK_WARNING);
    assert.equal(maskedSuccessHint('make || true', 'make: *** [all] Error 2'), FALLBACK_WARNING);
    assert.equal(maskedSuccessHint('npm test || :', 'npm ERR! Test failed.'), FALLBACK_WARNING);
    assert.equal(maskedSuccessHint('CI=1 pytest -q | tee log', 'FAILED tests/test_a.py::test_x'), PIPE_WARNING);
  });

  void it('says nothing without both a masking shape and a failure shape', () => {
    assert.equal(maskedSuccessHint('cargo build', 'error: could not compile'), undefined);
    assert.equal(maskedSuccessHint('cargo build | tail', 'Finished release'), undefined);
    assert.equal(maskedSuccessHint('a || b | tail', 'npm ERR! x'), PIPE_WARNING);
    assert.equal(maskedSuccessHint('make || echoes', 'make: *** x'), undefined, 'echoes is not echo');
    assert.equal(maskedSuccessHint('cargo build | tail_logs', 'error: could not compile'), undefined);
    assert.equal(maskedSuccessHint('cargo build | tail -5 | grep x', 'error: could not compile'), undefined);
  });

  void it('leaves commands that only read alone, looking past assignments and paths', () => {
    assert.equal(maskedSuccessHint('grep -r "npm ERR!" logs | head', 'npm ERR! x'), undefined);
    assert.equal(maskedSuccessHint('LC_ALL=C /usr/bin/cat build.log | tail', 'npm ERR! x'), undefined);
    assert.equal(maskedSuccessHint('./build.sh | tail', 'npm ERR! x'), PIPE_WARNING);
  });

  void it('needs the pytest and make shapes at the start of a line', () => {
    assert.equal(maskedSuccessHint('pytest | tail', 'summary: 3 failed'), undefined);
    assert.equal(maskedSuccessHint('pytest | tail', 'summary:\n3 failed'), PIPE_WARNING);
  });
});
