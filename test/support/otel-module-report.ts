/**
 * Preloaded into a Berth process (`NODE_OPTIONS=--import=<this file>`): when
 * the process exits, it writes the OpenTelemetry modules the process loaded
 * to the file named by BERTH_TEST_MODULE_REPORT, as a JSON array of paths.
 * The OpenTelemetry packages are CommonJS, so whatever imported them, they
 * are in the CommonJS module cache.
 */
import { writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { sep } from 'node:path';

const target = process.env.BERTH_TEST_MODULE_REPORT;
if (target) {
  const cache = createRequire(import.meta.url).cache;
  process.on('exit', () => {
    const loaded = Object.keys(cache).filter((path) => path.includes(`${sep}@opentelemetry${sep}`));
    writeFileSync(target, JSON.stringify(loaded));
  });
}
