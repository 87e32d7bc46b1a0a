/**
 * The seed document's three execute_code scripts (YAML search, batch
 * refactor, build-and-test pipeline), shared by the e2e tests that run them
 * on each backend. For each: the project files to create (absolute paths
 * under a project root the test picks), the script, and the checks on the
 * result a user sees. Each test keeps its own harness: how it creates the
 * files, runs the script, and reads the project back.
 */
import assert from 'node:assert/strict';

/** The part of an execute_code result the seed checks read. */
export interface SeedResult {
  status: string;
  output: string;
  tool_calls_made: number;
}

/** Find the *.yaml files that mention the database and preview them. */
export const yamlSearchSeed = {
  files: (project: string): Record<string, string> => ({
    [`${project}/app.yaml`]: 'database:\n  host: db.internal\n  port: 5432\n',
    [`${project}/worker.yaml`]: 'queue: redis\ndatabase: { host: replica }\n',
    [`${project}/other.yml`]: 'database: not matched by the glob\n',
    [`${project}/notes.txt`]: 'the database is fine\n',
  }),
  code: (project: string): string => `from hermes_tools import search_files, read_file
import json
# Find every config file and pull out the database settings
matches = search_files("database", path=${JSON.stringify(project)}, file_glob="*.yaml", limit=20)
configs = []
for match in matches.get("matches", []):
    content = read_file(match["path"])
    configs.append({"file": match["path"], "preview": content["content"][:200]})

print(json.dumps(configs, indent=2))
`,
  /** Only the two *.yaml files that mention it, each previewed; one search and two reads. */
  assertResult(r: SeedResult): void {
    assert.equal(r.status, 'success', JSON.stringify(r));
    const configs = JSON.parse(r.output) as Array<{ file: string; preview: string }>;
    assert.deepEqual(configs.map((c) => c.file.split('/').pop()).sort(), ['app.yaml', 'worker.yaml']);
    assert.match(configs.find((c) => c.file.endsWith('app.yaml'))?.preview ?? '', /host: db\.internal/);
    assert.equal(r.tool_calls_made, 3);
  },
};

/**
 * Batch refactor with search_files and patch(replace_all=True). The script's
 * paths are relative ("src/"): the test first changes the task's cwd to the
 * project root with terminal(), and they resolve against it as terminal()'s would.
 */
export const batchRefactorSeed = {
  files: (root: string): Record<string, string> => ({
    [`${root}/src/a.py`]: 'x = old_api_call(1)\n',
    [`${root}/src/b.py`]: 'def f():\n    return old_api_call(2) + old_api_call(3)\n',
    [`${root}/src/c.py`]: 'y = old_api_call(4)\nz = 1\nw = old_api_call(5)\n',
    [`${root}/src/d.py`]: 'print("untouched")\n',
  }),
  code: `from hermes_tools import search_files, read_file, patch
# Find every Python file that uses the deprecated API and fix it
matches = search_files("old_api_call", path="src/", file_glob="*.py")
fixed = 0
for match in matches.get("matches", []):
    result = patch(
        path=match["path"],
        old_string="old_api_call(",
        new_string="new_api_call(",
        replace_all=True
    )
    if "error" not in str(result):
        fixed += 1

print(f"Fixed {fixed} files out of {len(matches.get('matches', []))} matches")
`,
  /** src/b.py after the script ran, read back by each test its own way. */
  patchedB: 'def f():\n    return new_api_call(2) + new_api_call(3)\n',
  /**
   * c.py matches on two lines: its second patch finds the edit already made and, as upstream, answers with a
   * success-shaped no_change instead of an error, so the script counts it too. One search and four patches.
   */
  assertResult(r: SeedResult): void {
    assert.equal(r.status, 'success', JSON.stringify(r));
    assert.equal(r.output, 'Fixed 4 files out of 4 matches\n');
    assert.equal(r.tool_calls_made, 5);
  },
};

/** Build-and-test pipeline through terminal() reporting passed/failed counts. */
export const buildAndTestSeed = {
  files: (project: string): Record<string, string> => ({
    [`${project}/mathlib.py`]: 'def add(a, b):\n    return a + b\n',
    [`${project}/test_mathlib.py`]:
      'from mathlib import add\n\ndef test_add():\n    assert add(1, 2) == 3\n\n' +
      'def test_add_negative():\n    assert add(-1, -1) == -2\n\ndef test_wrong():\n    assert add(2, 2) == 5\n',
    // Where pytest is not installed the project's own tiny runner prints the same summary line.
    [`${project}/run_tests.py`]:
      'import importlib, sys, traceback\nsys.path.insert(0, ".")\nm = importlib.import_module("test_mathlib")\n' +
      'passed = failed = 0\nfor name in sorted(n for n in dir(m) if n.startswith("test_")):\n' +
      '    try:\n        getattr(m, name)()\n        passed += 1\n' +
      '    except AssertionError:\n        failed += 1\n        print(f"FAILED test_mathlib.py::{name}")\n' +
      'print(f"{failed} failed, {passed} passed")\nsys.exit(1 if failed else 0)\n',
  }),
  code(project: string): string {
    const command =
      `cd ${project} && if python3 -m pytest --version >/dev/null 2>&1; then python3 -m pytest --tb=short -q -p no:cacheprovider 2>&1; ` +
      'else python3 run_tests.py 2>&1; fi';
    return `from hermes_tools import terminal, read_file
import json, re
# Run the tests, parse the results and report
result = terminal(${JSON.stringify(command)}, timeout=120)
output = result.get("output", "")
def count(word):
    m = re.search(r"(\\d+) " + word, output)
    return int(m.group(1)) if m else 0

report = {
    "passed": count("passed"),
    "failed": count("failed"),
    "errors": count("error"),
    "exit_code": result.get("exit_code", -1),
    "summary": output[-500:] if len(output) > 500 else output
}

print(json.dumps(report, indent=2))
`;
  },
  /** Two passed, one failed (named in the summary), no errors, and the run's exit code 1. */
  assertResult(r: SeedResult): void {
    assert.equal(r.status, 'success', JSON.stringify(r));
    const report = JSON.parse(r.output) as { passed: number; failed: number; errors: number; exit_code: number; summary: string };
    assert.equal(report.passed, 2, report.summary);
    assert.equal(report.failed, 1, report.summary);
    assert.equal(report.errors, 0, report.summary);
    assert.equal(report.exit_code, 1);
    assert.match(report.summary, /test_wrong/);
  },
};
