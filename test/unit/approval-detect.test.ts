import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { checkCommand, detectDangerousCommand } from '../../services/dispatcher/approval/detection/detect.js';
import {
  HARDLINE_RULES,
  SUDO_STDIN_DESCRIPTION,
  UNINSPECTABLE_DESCRIPTION,
  hardlineMessage,
  hardlinePrefix,
} from '../../services/dispatcher/approval/detection/hardline.js';
import { analyzeCommand, commandVariants, normalizeCommand } from '../../services/dispatcher/approval/detection/normalize.js';
import { DANGEROUS_PATTERNS, DANGEROUS_PATTERN_KEYS } from '../../services/dispatcher/approval/detection/patterns.js';
import { APPROVAL_CORPUS, CORPUS_HOME_DIR } from '../fixtures/approval-corpus.js';

// Upstream hermes-agent's pattern keys in its precedence (docs/hermes-compat.md
// §5.2; Hermes-application keys left out), then its structural findings, then
// Berth's own (§5.3).
const SPEC_KEYS = [
  'delete in root path',
  'recursive delete',
  'recursive delete (long flag)',
  'recursive delete (flags after operands)',
  'Windows cmd destructive delete',
  'Windows PowerShell destructive delete',
  'PowerShell encoded command execution',
  'PowerShell destructive delete (Remove-Item)',
  'Windows destructive delete (recursive/quiet switch)',
  'pipe remote content to PowerShell (iwr | iex)',
  'execute remote content via Invoke-Expression',
  'force kill processes (taskkill /F)',
  'force kill processes (Stop-Process -Force)',
  'format filesystem (Format-Volume)',
  'wipe disk (Clear-Disk)',
  'disk partitioning (diskpart)',
  'format drive (format.com)',
  'wipe free space (cipher /w)',
  'grant Everyone access (icacls)',
  'reset ACLs recursively (icacls /reset)',
  'delete volume shadow copies (vssadmin)',
  'delete backups (wbadmin)',
  'modify boot configuration (bcdedit /set)',
  'registry delete (reg delete)',
  'registry value delete (Remove-ItemProperty -Force)',
  'force stop service (Stop-Service -Force)',
  'stop/delete service (sc)',
  'access to SSH keys (Windows path)',
  'world/other-writable permissions',
  'recursive world/other-writable (long flag)',
  'recursive chown to root',
  'recursive chown to root (long flag)',
  'format filesystem',
  'disk copy',
  'raw block device wipe (shred/wipefs/blkdiscard/sgdisk)',
  'write to block device',
  'SQL DROP',
  'SQL DELETE without WHERE',
  'SQL TRUNCATE',
  'overwrite system config',
  'stop/restart system service',
  'kill all processes',
  'force kill processes',
  'force kill processes (killall -KILL)',
  'force kill processes (killall -s KILL)',
  'kill processes by regex (killall -r)',
  'fork bomb',
  'pipe remote content to shell',
  'execute remote script via process substitution',
  'execute remote content via command substitution',
  'cloud metadata endpoint access (instance credentials)',
  'pipe decoded content to shell (possible command obfuscation)',
  'pipe xxd-decoded content to shell (possible command obfuscation)',
  'pipe tr-transformed output to shell (possible command obfuscation)',
  'pipe openssl-decoded content to shell (possible command obfuscation)',
  'overwrite system file via tee',
  'overwrite system file via redirection',
  'overwrite project env/config via tee',
  'overwrite project env/config via redirection',
  'xargs with rm',
  'find -exec/-execdir rm',
  'find dynamic shell word may expand to destructive flag',
  'find -delete',
  'dynamic shell word may expand to arbitrary program execution flag',
  'docker with remote daemon redirect (-H/--host)',
  'docker with daemon redirect (--context: alternate daemon)',
  'docker context use (switches default daemon for future commands)',
  'podman with remote daemon redirect (--url/--connection/--identity)',
  'podman remote mode (-r/--remote: remote daemon)',
  'docker/podman daemon redirect via environment (DOCKER_HOST/CONTAINER_HOST)',
  'docker compose restart/stop/kill/down (container lifecycle)',
  'docker restart/stop/kill (container lifecycle)',
  'kill process via pgrep/pidof expansion (self-termination)',
  'kill process via backtick pgrep/pidof expansion (self-termination)',
  'copy/move file into system config path',
  'overwrite project env/config file',
  'copy/move file into sensitive credential/SSH/shell-rc path',
  'in-place edit of sensitive credential/SSH/shell-rc path',
  'in-place edit of sensitive credential/SSH/shell-rc path (long flag)',
  'in-place edit of sensitive credential/SSH/shell-rc path (perl/ruby)',
  'in-place edit of system config',
  'in-place edit of system config (long flag)',
  'shell execution via heredoc',
  'git reset --hard (destroys uncommitted changes)',
  'git force push (rewrites remote history)',
  'git force push short flag (rewrites remote history)',
  'git clean with force (deletes untracked files)',
  'git branch force delete',
  'git branch force delete (long flags)',
  'git branch force delete (long flags, force-first)',
  'chmod +x followed by immediate execution',
  'sudo with privilege flag (stdin/askpass/shell/list)',
  'sudo with combined-flag privilege escalation',
  'package manager uninstall',
  'command parser limit or malformed executable payload',
  'shell command via -c/-lc flag',
  'script execution via -e/-c flag',
  'script execution via heredoc',
  'arbitrary program execution via rg --pre',
  'arbitrary program execution via rg --hostname-bin',
  'arbitrary program execution via sort --compress-program',
  'arbitrary program execution via ag --pager',
  'arbitrary program execution via man --pager',
  'arbitrary program execution via man --html',
  'arbitrary program execution via man -P',
  'arbitrary program execution via man -H',
  // Berth's own, after upstream's.
  'command name built at run time (variable, substitution or eval of one)',
];

void describe('normalizeCommand', () => {
  const cases: [name: string, input: string, expected: string, homeDir?: string][] = [
    ['strips ANSI colour codes', '\u001b[31mrm\u001b[0m -rf x', 'rm -rf x'],
    ['strips OSC sequences with a terminator', '\u001b]0;title\u0007ls', 'ls'],
    ['keeps the text after an unterminated OSC', '\u001b]rm -rf x', 'rm -rf x'],
    ['strips NUL', 'r\u0000m -rf x', 'rm -rf x'],
    ['applies NFKC to full-width text', 'ｒｍ　－ｒｆ　ｘ', 'rm -rf x'],
    ['joins backslash-newline continuations', 'rm -rf \\\n/tmp/x', 'rm -rf /tmp/x'],
    ['joins CRLF continuations', 'rm \\\r\n-rf x', 'rm -rf x'],
    ['folds the home directory', 'cat /home/alice/.ssh/id_rsa', 'cat ~/.ssh/id_rsa', '/home/alice'],
    ['folds a home directory given with a trailing slash', 'rm -rf /root', 'rm -rf ~', '/root/'],
    ['leaves a longer sibling path alone', 'ls /home/alicex', 'ls /home/alicex', '/home/alice'],
    ['folds $HOME and ${HOME}', 'ls $HOME/a ${HOME}/b', 'ls ~/a ~/b'],
    ['never folds / as a home directory', 'ls /etc', 'ls /etc', '/'],
    ['drops backslash escapes', 'r\\m -rf x', 'rm -rf x'],
    ['drops empty single quotes', "r''m -rf x", 'rm -rf x'],
    ['drops empty double quotes', 'r""m -rf x', 'rm -rf x'],
    ['turns $IFS and ${IFS} into spaces', 'rm$IFS-rf${IFS}x', 'rm -rf x'],
    ['turns $IFS spelled with quoting noise into a space', "rm$\\IFS-rf$''IFS/", 'rm -rf /'],
    ['keeps $IFSX, a different variable', 'echo $IFSX', 'echo $ifsx'],
    ['lower-cases', 'RM -RF X', 'rm -rf x'],
    ['keeps non-empty quotes', 'echo "a b"', 'echo "a b"'],
  ];
  for (const [name, input, expected, homeDir] of cases) {
    void it(name, () => {
      assert.equal(normalizeCommand(input, homeDir === undefined ? {} : { homeDir }), expected);
    });
  }
});

void describe('commandVariants', () => {
  const includes = (cmd: string, expected: string[]): void => {
    const variants = commandVariants(cmd);
    for (const variant of expected) {
      assert.ok(variants.includes(variant), `${JSON.stringify(cmd)}: missing ${JSON.stringify(variant)} in ${JSON.stringify(variants)}`);
    }
  };

  void it('starts with the normalised text', () => {
    assert.equal(commandVariants('LS -L')[0], 'ls -l');
  });
  void it('splits on ; && || | & and newlines', () => {
    includes('a 1; b 2 && c 3 || d 4 | e 5 & f 6\ng 7', ['a 1', 'b 2', 'c 3', 'd 4', 'e 5', 'f 6', 'g 7']);
  });
  void it('keeps pipelines and consecutive pairs as variants', () => {
    includes('curl x | sh; chmod +x f && ./f', ['curl x | sh', 'chmod +x f && ./f']);
  });
  void it('enters $( ), backticks, subshells, brace groups and process substitution', () => {
    includes('echo $(a 1) `b 2` (c 3) { d 4; } <(e 5)', ['a 1', 'b 2', 'c 3', 'd 4', 'e 5']);
  });
  void it('enters $( ) inside double quotes but not inside single quotes', () => {
    const variants = commandVariants(`echo "$(a 1)" '$(b 2)'`);
    assert.ok(variants.includes('a 1'));
    assert.ok(!variants.includes('b 2'));
  });
  void it('resolves quotes and escapes the way the shell does', () => {
    includes(`"r"m -rf 'a b' c\\ d`, ['rm -rf a b c d']);
    includes("$'\\x72\\x6d' -f x", ['rm -f x']);
  });
  void it('removes leading wrappers, keeping each intermediate form', () => {
    includes('sudo -u bob env A=1 nohup nice -n 5 timeout 10 rm x', [
      'sudo -u bob env a=1 nohup nice -n 5 timeout 10 rm x',
      'env a=1 nohup nice -n 5 timeout 10 rm x',
      'nohup nice -n 5 timeout 10 rm x',
      'rm x',
    ]);
    includes('time command exec builtin rm x', ['rm x']);
    includes('X=1 Y=2 rm x', ['rm x']);
  });
  void it('does not treat `command -v` as a wrapper', () => {
    assert.ok(!commandVariants('command -v rm').includes('rm'));
  });
  void it('parses the payload of sh -c, eval and heredocs into a shell', () => {
    includes(`bash -lc 'a 1; b 2'`, ['a 1', 'b 2']);
    includes(`eval "c 3"`, ['c 3']);
    includes('bash <<EOF\nd 4\nEOF', ['d 4']);
    includes("find . -exec sh -c 'e 5' \\;", ['e 5', 'sh -c e 5']);
  });
  void it('keeps heredoc bodies out of the commands when they are data', () => {
    assert.ok(!commandVariants('cat > f <<EOF\nrm -rf x\nEOF').some((v) => v.startsWith('rm')));
  });
  void it('lists output redirections as their own variants', () => {
    includes('echo x > /etc/hosts 2>>err.log', ['> /etc/hosts', '2>> err.log', 'echo x']);
  });
  void it('ignores comments', () => {
    assert.ok(!commandVariants('ls # rm -rf x').some((v) => v.startsWith('rm')));
  });
  void it('reports nesting too deep to inspect', () => {
    assert.equal(analyzeCommand(`${'$('.repeat(30)}x${')'.repeat(30)}`).incomplete, true);
    assert.equal(analyzeCommand('$($($(x)))').incomplete, false);
  });
});

void describe('pattern table', () => {
  void it('has the spec keys, verbatim, in the spec order, one regex each', () => {
    assert.deepEqual([...DANGEROUS_PATTERN_KEYS], SPEC_KEYS);
    assert.deepEqual(
      DANGEROUS_PATTERNS.map((p) => p.key),
      SPEC_KEYS,
    );
  });
  void it('has corpus entries that must be caught for every key', () => {
    for (const key of SPEC_KEYS) {
      const caught = APPROVAL_CORPUS.filter((entry) => entry.expect === key).length;
      assert.ok(caught >= 2, `only ${caught} corpus entries for ${JSON.stringify(key)}`);
    }
  });
});

void describe('hardline', () => {
  void it('formats the message with the spec prefix and upstream text', () => {
    assert.equal(hardlinePrefix('fork bomb'), 'BLOCKED (hardline): fork bomb.');
    assert.equal(
      hardlineMessage('fork bomb'),
      'BLOCKED (hardline): fork bomb. This command is on the unconditional blocklist and cannot be executed via the agent — not even with --yolo, /yolo, approvals.mode=off, or cron approve mode. If you genuinely need to run it, run it yourself in a terminal outside the agent.',
    );
  });
  void it("has upstream's 13 descriptions, in upstream's order, then the sudo -S guard", () => {
    assert.deepEqual(
      HARDLINE_RULES.map((r) => r.description),
      [
        'recursive delete of root filesystem',
        'recursive delete of system directory',
        'recursive delete of home directory',
        'format filesystem (mkfs)',
        'wipe raw block device',
        'dd to raw block device',
        'redirect to raw block device',
        'fork bomb',
        'kill all processes',
        'system shutdown/reboot',
        'init 0/6 (shutdown/reboot)',
        'systemctl poweroff/reboot',
        'telinit 0/6 (shutdown/reboot)',
        SUDO_STDIN_DESCRIPTION,
      ],
    );
    assert.equal(SUDO_STDIN_DESCRIPTION, 'sudo password guessing via stdin (sudo -S)');
    assert.equal(UNINSPECTABLE_DESCRIPTION, 'command parser limit exceeded');
  });
  void it('shows each description in the block message the model sees', () => {
    const cases: [cmd: string, description: string][] = [
      ['rm -rf /', 'recursive delete of root filesystem'],
      ['rm${IFS:0:1}-rf /', 'recursive delete of root filesystem'],
      ['rm -rf /usr', 'recursive delete of system directory'],
      ['rm -rf $HOME', 'recursive delete of home directory'],
      ['mkfs.ext4 /dev/sdb1', 'format filesystem (mkfs)'],
      ['sgdisk --zap-all /dev/sda', 'wipe raw block device'],
      ['dd if=/dev/zero of=/dev/sda', 'dd to raw block device'],
      ['cat x > /dev/nvme0n1', 'redirect to raw block device'],
      [':(){ :|:& };:', 'fork bomb'],
      ['kill -9 -1', 'kill all processes'],
      ['shutdown -r now', 'system shutdown/reboot'],
      ['init 6', 'init 0/6 (shutdown/reboot)'],
      ['systemctl kexec', 'systemctl poweroff/reboot'],
      ['telinit 0', 'telinit 0/6 (shutdown/reboot)'],
    ];
    for (const [cmd, description] of cases) {
      const check = checkCommand(cmd, { homeDir: CORPUS_HOME_DIR });
      assert.deepEqual(check, { verdict: 'block', pattern_key: null, description }, cmd);
      assert.ok(hardlineMessage(description).startsWith(`BLOCKED (hardline): ${description}. `), cmd);
    }
  });
  void it('blocks sudo -S with the stdin-guard message, which names no SUDO_PASSWORD setting', () => {
    assert.equal(checkCommand('echo hunter2 | sudo -S id').description, SUDO_STDIN_DESCRIPTION);
    const message = hardlineMessage(SUDO_STDIN_DESCRIPTION);
    assert.ok(message.startsWith("BLOCKED: sudo password guessing via stdin (sudo -S). Do not pipe passwords to 'sudo -S' — this is a brute-force attack vector."));
    assert.ok(!message.includes('SUDO_PASSWORD'));
  });
  void it('reports hardline hits without a pattern key', () => {
    assert.deepEqual(detectDangerousCommand('sudo rm -rf /'), {
      hardline: { description: 'recursive delete of root filesystem' },
    });
    assert.deepEqual(checkCommand(':(){ :|:& };:'), { verdict: 'block', pattern_key: null, description: 'fork bomb' });
  });
  void it('every rule is hit by some corpus command', () => {
    const seen = new Set(
      APPROVAL_CORPUS.filter((e) => e.expect === 'block').map((e) => checkCommand(e.cmd, { homeDir: CORPUS_HOME_DIR }).description),
    );
    for (const { description } of HARDLINE_RULES) assert.ok(seen.has(description), description);
    assert.ok(seen.has(UNINSPECTABLE_DESCRIPTION));
  });
});

void describe('checkCommand', () => {
  void it('returns allow, approve and block', () => {
    assert.deepEqual(checkCommand('ls'), { verdict: 'allow', pattern_key: null, description: null });
    assert.deepEqual(checkCommand('git push -f'), {
      verdict: 'approve',
      pattern_key: 'git force push short flag (rewrites remote history)',
      description: 'git force push short flag (rewrites remote history)',
    });
    assert.equal(checkCommand('reboot').verdict, 'block');
  });
});

void describe('approval corpus', () => {
  void it('has at least 300 commands', () => {
    assert.ok(APPROVAL_CORPUS.length >= 300, `${APPROVAL_CORPUS.length} commands`);
  });
  for (const { cmd, expect, note } of APPROVAL_CORPUS) {
    void it(`${JSON.stringify(cmd).slice(0, 100)} → ${expect}`, () => {
      const result = checkCommand(cmd, { homeDir: CORPUS_HOME_DIR });
      const actual = result.verdict === 'approve' ? result.pattern_key : result.verdict;
      assert.equal(
        actual,
        expect,
        `command ${JSON.stringify(cmd)}: expected ${expect}, got ${JSON.stringify(result)}${note === undefined ? '' : ` (${note})`}`,
      );
    });
  }
});

void describe('input size', () => {
  // No time is asserted: the point is that these finish. The timeout turns a
  // catastrophic-backtracking regression into a failure instead of a hang.
  const MEBIBYTE = 1 << 20;
  const fill = (unit: string): string => unit.repeat(Math.ceil(MEBIBYTE / unit.length)).slice(0, MEBIBYTE);
  const inputs: [name: string, cmd: string][] = [
    ['one long word', fill('a')],
    ['many arguments to rm', `rm ${fill('-a ')}`],
    ['many commands', fill('a;')],
    ['many pipes', fill('curl x | ')],
    ['many substitutions', fill('$(a)')],
    ['deep nesting', fill('$(')],
    ['many quotes', fill(`'a"`)],
    ['many sql words', `psql ${fill('delete from x ')}`],
    ['many operands to rm before a flag', `rm ${fill('a ')} -r`],
    ['many tr stages', fill('echo x | tr a b | ')],
    ['many cmd /c words', `cmd /c ${fill('x ')}`],
    ['many icacls words', `icacls ${fill('/grant ')}`],
    ['many package-manager options', `npm ${fill('-a b ')}uninstall x`],
    ['many metadata-like numbers', fill('169.254.169.2540 ')],
    ['many Windows path segments', `type C:${fill('\\a')}`],
    ['a dangerous command after 1 MB of wrappers', `${'sudo '.repeat(MEBIBYTE / 5)}rm -rf /`],
  ];
  for (const [name, cmd] of inputs) {
    void it(`checks 1 MB: ${name}`, { timeout: 120_000 }, () => {
      const result = checkCommand(cmd);
      assert.ok(['allow', 'approve', 'block'].includes(result.verdict));
    });
  }
  void it('still finds the command at the end of 1 MB of wrappers', { timeout: 120_000 }, () => {
    assert.equal(checkCommand(`${'sudo '.repeat(MEBIBYTE / 5)}rm -rf /`).verdict, 'block');
  });
});
