import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { checkCommand } from '../../services/dispatcher/approval/detection/detect.js';
import { hardlineMessage } from '../../services/dispatcher/approval/detection/hardline.js';
import {
  hasMalformedPayload,
  MALFORMED_PAYLOAD_DESCRIPTION,
  normalizeForPayload,
} from '../../services/dispatcher/approval/detection/malformed.js';
import { malformedGrep } from '../../services/dispatcher/approval/detection/malformed-grep.js';
import { posixWords } from '../../services/dispatcher/approval/detection/posix-words.js';

void describe('malformed executable payloads', () => {
  void it('splits words as a POSIX shell does, and says when quoting does not end', () => {
    assert.deepEqual(posixWords(`python3 -c 'print("a b")' x\\ y "q\\"r" "s\\t"`), ['python3', '-c', 'print("a b")', 'x y', 'q"r', 's\\t']);
    assert.deepEqual(posixWords('cat<<EOF >out'), ['cat', '<<', 'EOF', '>', 'out']);
    assert.deepEqual(posixWords("a '' b"), ['a', '', 'b']);
    assert.equal(posixWords("python3 -c 'x"), undefined);
    assert.equal(posixWords('echo "x'), undefined);
    assert.equal(posixWords('echo x\\'), undefined);
    assert.equal(posixWords('echo "x\\"'), undefined);
  });

  void it('reads quoting after upstream normalisation, which keeps letter case', () => {
    assert.equal(normalizeForPayload("r\\m -RF it''s $IFS x\\\ny"), 'rm -RF its   xy');
  });

  void it('asks for approval under the upstream key, with the allowlist key equal to it', () => {
    assert.deepEqual(checkCommand("python3 -c 'print(1"), {
      verdict: 'approve',
      pattern_key: MALFORMED_PAYLOAD_DESCRIPTION,
      description: MALFORMED_PAYLOAD_DESCRIPTION,
    });
    assert.equal(MALFORMED_PAYLOAD_DESCRIPTION, 'command parser limit or malformed executable payload');
  });

  void it('leaves the key to a command that runs code and parses when it comes first', () => {
    assert.equal(hasMalformedPayload("bash -c 'ls'; python3 \"x"), false);
    assert.equal(hasMalformedPayload("ls; python3 \"x"), true);
    assert.equal(hasMalformedPayload("ls \"x"), false, 'only interpreters and program-running read tools');
    assert.equal(hasMalformedPayload("sudo -u bob python3 'x"), true, 'wrappers are looked through');
    assert.equal(hasMalformedPayload("p\\ython3 'x"), true, 'the command word is read as the shell spells it');
  });

  void it('blocks a grep it cannot read with the hardline message', () => {
    const check = checkCommand('cat log | grep -e');
    assert.deepEqual(check, { verdict: 'block', pattern_key: null, description: MALFORMED_PAYLOAD_DESCRIPTION });
    assert.ok(hardlineMessage(MALFORMED_PAYLOAD_DESCRIPTION).startsWith(`BLOCKED (hardline): ${MALFORMED_PAYLOAD_DESCRIPTION}. `));
    assert.equal(malformedGrep('grep -e pattern --regexp=x -A 3 f'), undefined);
    assert.equal(malformedGrep('grep --after-context'), 'malformed');
    assert.equal(malformedGrep('egrep -P'), 'malformed');
    assert.equal(malformedGrep('grep -Pe'), 'malformed');
    assert.equal(malformedGrep('grep -Pefoo f'), undefined);
  });

  void it('stops at its work budget and fails closed instead of scanning on', () => {
    const nested = '$('.repeat(5_000);
    assert.equal(malformedGrep(nested, 10_000), 'uninspectable');
    assert.equal(hasMalformedPayload(nested, 10_000), true);
    // The full budget reads an ordinary long command to the end.
    const long = 'grep -n x f | sort | uniq -c; '.repeat(2_000);
    assert.equal(malformedGrep(long), undefined);
    assert.equal(hasMalformedPayload(long), false);
  });
});

void describe('hardline message for what could not be read', () => {
  void it('adds upstream\'s recovery advice for the two parser descriptions only', () => {
    const recovery =
      ' RECOVERY: this block fires on oversized/unparseable inline command payloads (heredocs, giant one-liners), not on the operation itself. ' +
      'Write the script to a file with write_file, then run it: terminal(command="bash /path/script.sh") or "python3 /path/script.py". Do not retry inline.';
    assert.ok(hardlineMessage(MALFORMED_PAYLOAD_DESCRIPTION).endsWith(`outside the agent.${recovery}`));
    assert.ok(hardlineMessage('command parser limit exceeded').endsWith(`outside the agent.${recovery}`));
    assert.ok(!hardlineMessage('fork bomb').includes('RECOVERY'));
  });
});
