/**
 * The commands the README and docs/ show, run as a reader would run them
 * (blocks marked `<!-- doc-test: run -->`): against a `berth serve` started
 * as `make run` starts it, each block in a fresh directory of its own, with
 * `bin/berth` and `berth` both the build under test. What each command
 * prints must be what the page shows (test/support/doc-console.ts says how
 * the page's output is read).
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, symlinkSync } from 'node:fs';
import { join } from 'node:path';
import { commandBlocks } from '../support/markdown-docs.js';
import { outputMismatch, parseConsole, substituteIds, type IdMap } from '../support/doc-console.js';
import { BERTH_BIN, startServe, type ServeProcess } from '../support/serve-process.js';
import { makeUserDirectory, type UserDirectory } from '../support/user-directory.js';

/** The workspace the pages show (`make run`'s default for a user named you); the run's own stands in for it. */
const PAGE_WORKSPACE = '/home/you/berth-workspace';

function run(script: string, cwd: string, env: NodeJS.ProcessEnv): Promise<{ code: number; output: string }> {
  return new Promise((resolve, reject) => {
    // stdout and stderr interleaved as a terminal shows them.
    const child = spawn('bash', ['-c', `exec 2>&1\n${script}`], { cwd, env, stdio: ['ignore', 'pipe', 'inherit'] });
    let output = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (output += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), 120_000);
    child.once('error', reject);
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code: code ?? -1, output });
    });
  });
}

describe('commands shown in the docs', () => {
  let serve: ServeProcess;
  let user: UserDirectory;
  let env: NodeJS.ProcessEnv;

  before(async () => {
    user = makeUserDirectory('berth-e2e-docs-');
    serve = await startServe([], { env: { TERMINAL_CWD: user.workspace } });
    env = { ...process.env, BERTH_SERVER: serve.address, PATH: user.path };
    delete env.BERTH_API_KEY;
  });

  after(async () => {
    await serve?.stop();
    user?.remove();
  });

  const blocks = commandBlocks().filter((b) => b.test.kind === 'run');
  for (const { file, block } of blocks) {
    test(`${file}:${block.line} (${block.lang})`, async () => {
      const cwd = mkdtempSync(join(user.root, 'block-'));
      // The pages run bin/berth from the checkout; here it is the build under test.
      mkdirSync(join(cwd, 'bin'));
      symlinkSync(BERTH_BIN, join(cwd, 'bin', 'berth'));
      const local = (text: string) => text.split(PAGE_WORKSPACE).join(user.workspace);
      if (block.lang !== 'console') {
        const r = await run(`set -euo pipefail\n${local(block.body)}`, cwd, env);
        assert.equal(r.code, 0, `${file}:${block.line} exited ${r.code}:\n${r.output}`);
        return;
      }
      const ids: IdMap = new Map();
      for (const step of parseConsole(block.body)) {
        const command = substituteIds(local(step.command), ids);
        const r = await run(command, cwd, env);
        const mismatch = outputMismatch(step.expected.map(local), r.output, ids);
        assert.equal(mismatch, undefined, `${file}:${block.line}: $ ${command}\n${mismatch}\n--- it printed ---\n${r.output}`);
      }
    });
  }
});
