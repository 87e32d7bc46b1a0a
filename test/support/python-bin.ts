/**
 * A directory with `python3` and `python` linked straight to the real
 * interpreter. Put first on PATH so scripts skip version-manager shims
 * (pyenv's cost seconds per start on a loaded machine); the interpreter is
 * the same one the shim would pick.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, symlinkSync } from 'node:fs';
import path from 'node:path';

/** The interpreter `python3` resolves to here, as an absolute path. */
export function realPython(): string {
  return execFileSync('python3', ['-c', 'import sys; print(sys.executable)'], { encoding: 'utf8' }).trim();
}

/** Creates `<parent>/python-bin` with the two links; returns its path. */
export function pythonBinDir(parent: string): string {
  const dir = path.join(parent, 'python-bin');
  mkdirSync(dir, { recursive: true });
  const python = realPython();
  for (const name of ['python3', 'python']) symlinkSync(python, path.join(dir, name));
  return dir;
}
