/**
 * The backend conformance suite. Every terminal backend must pass it, the
 * built-in ones and a third party's alike (published as `berth/conformance`):
 * it drives a backend through TaskEnvironments (the shell-state runner and
 * process registry on top), exactly as the executor does (backend-suite.ts),
 * and checks the behaviour agents rely on (spec §3): the shell, background
 * processes, execute_code, files, isolation and release (one file of cases
 * each).
 *
 * Process checks run inside the environment (`/proc` read by a command), not
 * on the test host, so they hold for remote and containerised backends too.
 *
 * Usage, in a test file run by `node --test`:
 *
 *     runBackendConformance('local', async () => new LocalBackend({ ... }));
 */
import { describe } from 'node:test';
import type { Backend, BackendEnvironment } from '../executor/backend.js';
import { backendSuite } from './backend-suite.js';
import { backgroundCases, droppedStreamCases } from './background-cases.js';
import { executeCodeCases } from './execute-code-cases.js';
import { fileCases } from './file-cases.js';
import { isolationCases } from './isolation-cases.js';
import { ptyCases, shellStateCases, timeoutCases } from './shell-cases.js';

export interface BackendConformanceOptions {
  /**
   * Tasks share one host (local, ssh): they see each other's files and
   * processes, so a second task can confirm that a released task left
   * nothing behind. False for containers. Default true.
   */
  readonly sharedHost?: boolean;
  /**
   * Checks from outside whether a released environment still exists
   * (container present, state directory present). When absent and tasks share
   * a host, a second task checks that the released state directory is gone.
   */
  readonly environmentExists?: (env: BackendEnvironment) => Promise<boolean>;
  /** Multiplies every wait and limit, for slow backends; default 1. */
  readonly timeScale?: number;
  /** Skip the PTY checks even when the backend reports PTY support. */
  readonly skipPty?: boolean;
  /** Tenant for the tasks the suite creates; default `conformance`. */
  readonly tenant?: string;
  /**
   * Drops the stream between the executor and the environment's exec agent
   * (as a broken connection would), for backends that have one. Absent
   * (local: no agent stream), the dropped-stream case is not registered.
   */
  readonly dropAgentStream?: (env: BackendEnvironment) => Promise<void>;
  /**
   * What a background process does when the agent stream drops: `survives`
   * (found again by poll, still killable, after the executor reconnects) or
   * `ends` (the agent stops what it started when its stream ends; poll says
   * it exited and nothing is left running). Default `survives`.
   */
  readonly backgroundAfterDrop?: 'survives' | 'ends';
  /**
   * Every environment runs execute_code scripts itself (it has an rpcDir or
   * an rpcRelay): registers the case that a script sees terminal's files.
   * Default false (a backend whose scripts need a code container).
   */
  readonly executeCode?: boolean;
}

/**
 * Registers the conformance tests for one backend. `makeBackend` runs once
 * before the tests; the suite closes the backend afterwards.
 */
export function runBackendConformance(
  name: string,
  makeBackend: () => Promise<Backend>,
  options: BackendConformanceOptions = {},
): void {
  const sharedHost = options.sharedHost ?? true;
  const settings = { scale: options.timeScale ?? 1, tenant: options.tenant ?? 'conformance' };

  describe(`backend conformance: ${name}`, () => {
    const suite = backendSuite(name, makeBackend, settings);
    shellStateCases(suite);
    timeoutCases(suite);
    backgroundCases(suite, options);
    const dropAgentStream = options.dropAgentStream;
    if (dropAgentStream) droppedStreamCases(suite, { dropAgentStream, backgroundAfterDrop: options.backgroundAfterDrop });
    if (options.executeCode) executeCodeCases(suite);
    fileCases(suite);
    isolationCases(suite, { sharedHost, environmentExists: options.environmentExists });
    ptyCases(suite, options);
  });
}
