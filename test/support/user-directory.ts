/**
 * A directory laid out as a user's machine for tests that run what the docs
 * show: a workspace for agents' commands (what `make run` calls
 * ~/berth-workspace) and a bin/ with `berth` (the build under test) for PATH.
 */
import { mkdirSync, mkdtempSync, realpathSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BERTH_BIN } from './serve-process.js';

export interface UserDirectory {
  readonly root: string;
  readonly workspace: string;
  /** PATH with `berth` first. */
  readonly path: string;
  remove(): void;
}

export function makeUserDirectory(prefix: string): UserDirectory {
  const root = realpathSync(mkdtempSync(join(tmpdir(), prefix)));
  const workspace = join(root, 'berth-workspace');
  mkdirSync(workspace);
  mkdirSync(join(root, 'bin'));
  symlinkSync(BERTH_BIN, join(root, 'bin', 'berth'));
  return {
    root,
    workspace,
    path: `${join(root, 'bin')}:${process.env.PATH ?? ''}`,
    remove: () => rmSync(root, { recursive: true, force: true }),
  };
}
