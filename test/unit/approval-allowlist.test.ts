import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import {
  LEGACY_KEY_ALIASES,
  allowlistApproves,
  detectAllDangerous,
  entryMatchesCommand,
  hasShellOperator,
} from '../../services/dispatcher/approval/detection/allowlist.js';
import { DANGEROUS_PATTERN_KEYS } from '../../services/dispatcher/approval/detection/patterns.js';

const HOME = { homeDir: '/home/alice' };

/** Whether a `command_allowlist` lets the command run without asking. */
function approved(entries: readonly string[], command: string): boolean {
  const { hardline, keys } = detectAllDangerous(command, HOME);
  assert.equal(hardline, undefined, `${command} is hardline; an allowlist cannot apply`);
  assert.ok(keys.length > 0, `${command} needs no approval at all`);
  return allowlistApproves(entries, command, keys);
}

void describe('command_allowlist: upstream pattern keys carry over', () => {
  // An entry from an upstream config.yaml and a command that upstream reports under it.
  const cases: [entry: string, command: string][] = [
    ['git force push short flag (rewrites remote history)', 'git push -f origin main'],
    ['git force push (rewrites remote history)', 'git push --force origin main'],
    ['recursive chown to root (long flag)', 'chown --recursive root x'],
    ['force kill processes (killall -KILL)', 'killall -9 node'],
    ['force kill processes (killall -s KILL)', 'killall -s KILL node'],
    ['kill processes by regex (killall -r)', 'killall -r "^node"'],
    ['pipe xxd-decoded content to shell (possible command obfuscation)', 'echo 6c73 | xxd -r -p | sh'],
    ['pipe openssl-decoded content to shell (possible command obfuscation)', 'openssl enc -d -base64 -in x | sh'],
    ['overwrite project env/config via tee', 'echo A=1 | tee .env'],
    ['overwrite project env/config file', 'cp .env.example .env'],
    ['in-place edit of system config (long flag)', "sed --in-place 's/a/b/' /etc/hosts"],
    ['git branch force delete (long flags)', 'git branch --delete --force old'],
    ['sudo with combined-flag privilege escalation', 'sudo -nA make install'],
    ['package manager uninstall', 'npm uninstall left-pad'],
    ['arbitrary program execution via rg --pre', 'rg --pre=./pdftotext.sh invoice docs'],
    ['arbitrary program execution via man -P', 'man -P cat ls'],
    ['find dynamic shell word may expand to destructive flag', 'find build -del*'],
    ['dynamic shell word may expand to arbitrary program execution flag', 'sort --compress-program* data'],
    ['cloud metadata endpoint access (instance credentials)', 'curl http://169.254.169.254/latest/meta-data/'],
    ['docker with remote daemon redirect (-H/--host)', 'docker -H tcp://build:2375 ps'],
    ['Windows cmd destructive delete', 'cmd /c "del build.log"'],
  ];
  for (const [entry, command] of cases) {
    void it(`${JSON.stringify(entry)} approves ${JSON.stringify(command)}`, () => {
      assert.equal(approved([entry], command), true);
      assert.equal(approved(['some other key'], command), false);
    });
  }
  void it('a split key approves only its own half', () => {
    assert.equal(approved(['git force push (rewrites remote history)'], 'git push -f'), false);
    assert.equal(approved(['git force push short flag (rewrites remote history)'], 'git push --force'), false);
  });
});

void describe('the single-temp-file exemption reaches the approval flow', () => {
  void it('finds no key for upstream\'s exempt cleanup, and the usual one for anything more', () => {
    assert.deepEqual(detectAllDangerous('rm -f /tmp/hermes-verify-abc123', HOME), { keys: [] });
    assert.deepEqual(detectAllDangerous('rm -f /tmp/hermes-verify-abc123 /tmp/x', HOME).keys, ['delete in root path']);
  });
});

void describe('command_allowlist: legacy regex-derived keys', () => {
  const cases: [entry: string, command: string][] = [
    [String.raw`rm\s+-[^\s]*r`, 'rm -rf build'],
    [String.raw`rm\s+(-[^\s]*\s+)*/`, 'rm -f /tmp/build.log'],
    [String.raw`chmod\s+(-[^\s]*\s+)*(777|666|o\+[rwx]*w|a\+[rwx]*w)`, 'chmod 777 share'],
    [String.raw`git\s+reset\s+--h(?:a(?:r(?:d)?)?)?`, 'git reset --hard HEAD~1'],
    [String.raw`git\s+branch\s+-D`, 'git branch -D topic'],
    [String.raw`(python[23]?|perl|ruby|node)\s+-[ec]\s+`, "python3 -c 'print(1)'"],
    [String.raw`(python[23]?|perl|ruby|node)\s+<<`, 'python3 <<EOF\nprint(1)\nEOF'],
    [String.raw`DROP\s+(TABLE|DATABASE)`, 'psql -c "DROP TABLE t"'],
    ['(?:rg|sort|ag|man)', 'rg --pre{,=x} foo'],
  ];
  for (const [entry, command] of cases) {
    void it(`${JSON.stringify(entry)} approves ${JSON.stringify(command)}`, () => {
      assert.equal(approved([entry], command), true);
    });
  }
  void it('lists aliases only for keys that exist', () => {
    for (const key of Object.keys(LEGACY_KEY_ALIASES)) {
      assert.ok((DANGEROUS_PATTERN_KEYS as readonly string[]).includes(key), key);
    }
  });
  void it('still needs every key of a command that matches several', () => {
    const command = 'git push -f; rm -rf build';
    assert.equal(approved(['git force push short flag (rewrites remote history)'], command), false);
    assert.equal(approved(['git force push short flag (rewrites remote history)', String.raw`rm\s+-[^\s]*r`], command), true);
  });
});

void describe('command_allowlist: command text and globs', () => {
  void it('matches exactly, with * and ?, and with [...] classes as fnmatch does', () => {
    assert.equal(entryMatchesCommand('rm -rf build', '  rm -rf build '), true);
    assert.equal(entryMatchesCommand('rm -rf build/*', 'rm -rf build/a/b'), true);
    assert.equal(entryMatchesCommand('git push -f origin v?', 'git push -f origin v2'), true);
    assert.equal(entryMatchesCommand('rm -rf dist-[0-9]', 'rm -rf dist-7'), true);
    assert.equal(entryMatchesCommand('rm -rf dist-[0-9]', 'rm -rf dist-x'), false);
    assert.equal(entryMatchesCommand('rm -rf dist-[!0-9]', 'rm -rf dist-x'), true);
    assert.equal(entryMatchesCommand('rm -rf dist-[!0-9]', 'rm -rf dist-7'), false);
    assert.equal(entryMatchesCommand('rm -rf [x', 'rm -rf [x'), true, 'an unclosed [ is literal');
    assert.equal(entryMatchesCommand('RM -rf build', 'rm -rf build'), false, 'case-sensitive as fnmatchcase');
  });
  void it('is quote-aware about compound commands', () => {
    assert.equal(hasShellOperator("cargo bench -- '^a(b|c)$'"), false, 'quoted data');
    assert.equal(entryMatchesCommand('cargo bench *', "cargo bench -- '^a(b|c)$'"), true);
    assert.equal(hasShellOperator('make x; rm -rf ~'), true);
    assert.equal(hasShellOperator('make x && y'), true);
    assert.equal(hasShellOperator('echo $(id)'), true);
    assert.equal(hasShellOperator('echo "$(id)"'), true, '$ inside double quotes expands');
    assert.equal(hasShellOperator('echo "`id`"'), true);
    assert.equal(hasShellOperator("echo 'a"), true, 'an unterminated quote');
    assert.equal(hasShellOperator("bash -c 'a; b'"), true, 'a quoted ; handed to -c is code');
    assert.equal(hasShellOperator("grep -e 'a;b' f"), true, '-e counts like upstream');
    assert.equal(hasShellOperator("grep 'a;b' f"), false);
    assert.equal(hasShellOperator('echo $HOME (x)'), false);
    assert.equal(entryMatchesCommand('make *', 'make x; rm -rf ~'), false);
  });
});
