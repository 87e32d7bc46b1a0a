/**
 * The Node.js flags Berth's servers run with in the image (deploy/Dockerfile,
 * its ENTRYPOINT; a unit test keeps the two the same), and in `berth bench`,
 * which measures servers as deployed. Running `berth serve`, `dispatcher` or
 * `executor` from npm, set them with `NODE_OPTIONS` (docs/deploying.md).
 *
 * `--max-semi-space-size=2` (MiB): V8's young generation grows to 16 MiB per
 * semi-space by default while a server starts (its module loading allocates
 * a lot), and the pages stay resident. Capped at 2 MiB, a just-started
 * dispatcher measured 77.6 MiB instead of 89.4 MiB, an executor 73.2 instead
 * of 81.9 (docs/performance.md), with CPU per call unchanged within noise
 * (no-op calls and `terminal true`, 3,000 and 600 calls beside the default).
 */
export const SERVER_NODE_FLAGS: readonly string[] = ['--max-semi-space-size=2'];
