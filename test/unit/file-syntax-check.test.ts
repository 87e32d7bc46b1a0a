import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import {
  pythonExtension,
  structuredExtension,
  structuredSyntaxRefusal,
  syntaxError,
  syntaxRefusal,
} from '../../services/dispatcher/tools/file/syntax-check.js';

void describe('structured-format extensions', () => {
  void it('reads the extension as Python splitext does, lower-cased', () => {
    assert.equal(pythonExtension('/a/b/config.JSON'), '.json');
    assert.equal(pythonExtension('/a/b.d/config'), '');
    assert.equal(pythonExtension('/a/.json'), '', 'a leading dot names a hidden file, not an extension');
    assert.equal(pythonExtension('..yaml'), '');
    assert.equal(pythonExtension('x.tar.toml'), '.toml');
  });

  void it('checks .json, .yaml, .yml and .toml only', () => {
    assert.deepEqual(
      ['a.json', 'a.yaml', 'a.yml', 'a.toml', 'a.py', 'a.jsonc', 'a.txt', 'Cargo.TOML'].map(structuredExtension),
      ['.json', '.yaml', '.yml', '.toml', undefined, undefined, undefined, '.toml'],
    );
  });
});

void describe('syntaxError', () => {
  void it('refuses JSON that does not parse, empty JSON included, in Type: message form', async () => {
    assert.equal(await syntaxError('.json', '{"a": 1}'), undefined);
    assert.equal(await syntaxError('.json', ''), 'SyntaxError: Unexpected end of JSON input');
    assert.match(await syntaxError('.json', '{"a": 1,}') ?? '', /^SyntaxError: /);
    assert.match(await syntaxError('.json', '\ufeff{}') ?? '', /^SyntaxError: /, 'a BOM is not JSON whitespace, for Python either');
  });

  void it("accepts NaN and ±Infinity as Python's json does, and nothing glued to them", async () => {
    assert.equal(await syntaxError('.json', '{"a": NaN, "b": [Infinity, -Infinity], "c": "NaN"}'), undefined);
    assert.match(await syntaxError('.json', '[1NaN]') ?? '', /^SyntaxError: /);
    assert.match(await syntaxError('.json', '{NaN: 1}') ?? '', /^SyntaxError: /);
    assert.match(await syntaxError('.json', '["a\\"NaN]') ?? '', /^SyntaxError: /, 'NaN inside an unterminated string');
  });

  void it('checks YAML for syntax only: empty, comments, several documents, tags, repeated keys and aliases pass', async () => {
    for (const ok of ['', '# only a comment\n', '---\na: 1\n---\nb: 2\n', 'Resources: !Sub "x"\n', 'a: 1\na: 2\n', 'b: *undefined\n']) {
      assert.equal(await syntaxError('.yaml', ok), undefined, JSON.stringify(ok));
    }
    assert.equal(
      await syntaxError('.yml', 'a: b: c\n'),
      'YAMLParseError: Nested mappings are not allowed in compact mappings at line 1, column 4:\n\na: b: c\n   ^',
    );
    assert.match(await syntaxError('.yaml', 'a: "unterminated\n') ?? '', /^YAMLParseError: Missing closing "quote/);
  });

  void it('does not expand YAML aliases (a billion laughs costs what its text costs)', async () => {
    const levels = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]'];
    for (let i = 1; i < 12; i++) {
      const prev = String.fromCharCode(96 + i);
      const name = String.fromCharCode(97 + i);
      levels.push(`${name}: &${name} [${Array(9).fill(`*${prev}`).join(',')}]`);
    }
    assert.equal(await syntaxError('.yaml', levels.join('\n')), undefined);
  });

  void it('refuses TOML that does not parse; empty and comment-only TOML pass', async () => {
    assert.equal(await syntaxError('.toml', ''), undefined);
    assert.equal(await syntaxError('.toml', '# nothing\n'), undefined);
    assert.equal(await syntaxError('.toml', '[package]\nname = "x"\n'), undefined);
    assert.match(await syntaxError('.toml', 'a = 1\na = 2\n') ?? '', /^TomlError: Invalid TOML document: /);
    assert.match(await syntaxError('.toml', 'name = \n') ?? '', /^TomlError: Invalid TOML document: invalid value/);
  });

  void it('has no opinion on other extensions', async () => {
    assert.equal(await syntaxError('.py', 'def ('), undefined);
  });
});

void describe('structuredSyntaxRefusal', () => {
  void it("gives upstream's text with the path and extension", async () => {
    assert.equal(
      await structuredSyntaxRefusal('/w/conf.JSON', '{'),
      "Refusing to write '/w/conf.JSON': candidate content fails .json syntax validation (SyntaxError: Expected " +
        "property name or '}' in JSON at position 1). The file was NOT created or modified. Fix the content and retry.",
    );
    assert.equal(await structuredSyntaxRefusal('/w/conf.json', '{}'), undefined);
    assert.equal(await structuredSyntaxRefusal('/w/notes.txt', '{'), undefined);
    assert.equal(
      syntaxRefusal('p.toml', '.toml', 'E: m'),
      "Refusing to write 'p.toml': candidate content fails .toml syntax validation (E: m). The file was NOT created " +
        'or modified. Fix the content and retry.',
    );
  });

  void it('checks large content in a worker thread with the same answers', async () => {
    const rows = Array.from({ length: 20_000 }, (_, i) => `  "key${i}": "value ${i}"`);
    const good = `{\n${rows.join(',\n')}\n}`;
    assert.ok(good.length > 64 * 1024);
    assert.equal(await structuredSyntaxRefusal('/w/big.json', good), undefined);
    const bad = `${good.slice(0, -2)},\n}`;
    assert.equal(
      await structuredSyntaxRefusal('/w/big.json', bad),
      syntaxRefusal('/w/big.json', '.json', (await syntaxError('.json', bad)) ?? 'expected an error'),
    );
    const yaml = `${'items:\n'}${Array.from({ length: 10_000 }, (_, i) => `  - name: item ${i}`).join('\n')}\n  bad: [\n`;
    assert.match((await structuredSyntaxRefusal('/w/big.yaml', yaml)) ?? '', /fails \.yaml syntax validation \(YAMLParseError: /);
  });

  void it('refuses nesting too deep for the worker stack, as Python refuses on RecursionError', async () => {
    const deep = `a: ${'['.repeat(200_000)}${']'.repeat(200_000)}\n`;
    const refusal = (await structuredSyntaxRefusal('/w/deep.yaml', deep)) ?? '';
    assert.match(refusal, /^Refusing to write '\/w\/deep\.yaml': candidate content fails \.yaml syntax validation \(/);
  });
});
