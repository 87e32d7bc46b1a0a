/**
 * `berth/conformance`: the suite every terminal backend passes, for a third
 * party to run against their own backend with Node's test runner:
 *
 *     // conformance.test.js, run with `node --test`
 *     import { runBackendConformance } from 'berth/conformance';
 *     import createBackend from 'my-berth-backend';
 *     runBackendConformance('mine', () => createBackend(config, logger));
 *
 * The names exported here are semver-stable (docs/versioning.md); the
 * checks themselves grow with Berth's behaviour, as its own backends must
 * pass them too (docs/backends/writing-a-backend.md).
 */
export { runBackendConformance, type BackendConformanceOptions } from './backend-conformance.js';
export { countProcessesScript } from './process-probe.js';
export { runSuspendConformance, type SuspendConformanceOptions } from './suspend-conformance.js';
export { runLifecycleConformance, type LifecycleConformanceOptions } from './lifecycle-conformance.js';
