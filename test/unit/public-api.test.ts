/**
 * The public API of `berth/backend-kit` and `berth/conformance` is what its
 * checked-in report (docs/api/) says: a change of an exported name, a
 * member, a parameter, or a type they reference fails here until the report
 * is regenerated and committed with it, so the change is seen and judged
 * against docs/versioning.md. And the report notices such changes.
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, test } from 'node:test';
import { publicEntries, renderApiReport, type PublicEntry } from '../support/api-report.js';
import { REPO_ROOT } from '../support/serve-process.js';

/** Lines only in `before` (-) and only in `after` (+), a few of each: enough to see what changed. */
function changedLines(before: string, after: string): string {
  const was = new Set(before.split('\n'));
  const now = new Set(after.split('\n'));
  const removed = [...was].filter((l) => !now.has(l)).slice(0, 15).map((l) => `- ${l}`);
  const added = [...now].filter((l) => !was.has(l)).slice(0, 15).map((l) => `+ ${l}`);
  return [...removed, ...added].join('\n');
}

describe('the public API reports', () => {
  for (const entry of publicEntries(REPO_ROOT)) {
    test(`${entry.specifier} exports what ${entry.report} records`, () => {
      const recorded = readFileSync(path.join(REPO_ROOT, entry.report), 'utf8');
      const built = renderApiReport(REPO_ROOT, entry);
      assert.ok(
        built === recorded,
        `The public API of ${entry.specifier} differs from ${entry.report}:\n${changedLines(recorded, built)}\n` +
          `If the change is meant, run \`make api-report\` and commit the report with it. Under docs/versioning.md, within a ` +
          `major version names and optional members are only added: a removed or changed name, member or parameter, or a new ` +
          `required member, breaks backends built on it and waits for a major release (before 1.0, a minor one) with a ` +
          `**Breaking** entry in CHANGELOG.md.`,
      );
    });
  }
});

describe('the report', () => {
  /** A package of compiled types at a temp root: `index.d.ts` re-exports from `impl.d.ts`. */
  function reportOf(impl: string): string {
    const root = mkdtempSync(path.join(tmpdir(), 'berth-api-report-'));
    try {
      mkdirSync(path.join(root, 'dist'));
      writeFileSync(path.join(root, 'dist', 'index.d.ts'), "export { Kit, type Options, helper } from './impl.js';\n");
      writeFileSync(path.join(root, 'dist', 'impl.d.ts'), impl);
      const entry: PublicEntry = { specifier: 'pkg/kit', types: path.join('dist', 'index.d.ts'), report: 'kit.api.md' };
      return renderApiReport(root, entry);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  }
  const impl = (shape: string, privateField: string) =>
    `interface Shape { ${shape} }\n` +
    `/** The kit. */\nexport declare class Kit { ${privateField}; #private; protected hook(): void; run(shape: Shape): Promise<string>; }\n` +
    'export interface Options { readonly name: string; }\n' +
    'export declare function helper(options: Options): Kit;\n';

  test('holds every export with its declaration and the types they reference, not private members or comments', () => {
    const report = reportOf(impl('size: number;', 'private secret'));
    for (const heading of ['### `Kit`: class', '### `Options`: interface', '### `helper`: function', '### `Shape` (dist/impl.d.ts): interface']) {
      assert.ok(report.includes(`${heading}\n`), `${heading} in:\n${report}`);
    }
    assert.match(report, /protected hook\(\): void;\n {4}run\(shape: Shape\): Promise<string>;/);
    assert.doesNotMatch(report, /secret|#private|The kit/);
  });

  test('changes with a type the exports only reference, and not with a private member', () => {
    const before = reportOf(impl('size: number;', 'private secret'));
    assert.notEqual(reportOf(impl('size: string;', 'private secret')), before);
    assert.equal(reportOf(impl('size: number;', 'private other')), before);
  });
});
