/**
 * A directory with `python3` and `python` linked straight to the real
 * interpreter. Put first on PATH so scripts skip version-manager shims
 * (pyenv's cost seconds per start on a loaded machine); the interpreter is
 * the same one the shim would pick.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, symlinkSync } from 'node:fs';
import path from 'node:path';
import { toolsRequired } from './require-tools.js';

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

/**
 * A Python interpreter that has grpcio and protobuf (the Python client's
 * runtime), as an absolute path, or the reason there is none. Tries
 * BERTH_TEST_PYTHON, then Debian's /usr/bin/python3 (where python3-grpcio and
 * python3-protobuf install), then `python3` on PATH. Under make test or CI a
 * missing one throws: scripts/test-setup.sh installs Debian's packages.
 */
export function grpcPython(): { python: string; reason?: undefined } | { python?: undefined; reason: string } {
  const candidates = [process.env.BERTH_TEST_PYTHON, '/usr/bin/python3', 'python3'].filter((c): c is string => !!c);
  const tried: string[] = [];
  for (const candidate of candidates) {
    try {
      const python = execFileSync(candidate, ['-c', 'import grpc, google.protobuf, sys; print(sys.executable)'], {
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'pipe'],
      }).trim();
      return { python };
    } catch {
      tried.push(candidate);
    }
  }
  const reason =
    `no Python with grpcio and protobuf (tried ${tried.join(', ')}); ` +
    'on Debian: apt-get install python3-grpcio python3-protobuf, or set BERTH_TEST_PYTHON';
  if (toolsRequired()) throw new Error(reason);
  return { reason };
}
