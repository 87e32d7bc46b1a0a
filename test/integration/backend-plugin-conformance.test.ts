/**
 * The example backend package (examples/backend-plugin/, built only on
 * berth/backend-kit) passes the conformance suite: its own test file, the
 * one its package runs with `node --test`, run here in the tier as is.
 */
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { REPO_ROOT } from '../support/serve-process.js';

await import(pathToFileURL(path.join(REPO_ROOT, 'examples', 'backend-plugin', 'dist', 'test', 'conformance.test.js')).href);
