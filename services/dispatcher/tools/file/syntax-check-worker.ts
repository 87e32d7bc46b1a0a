/**
 * Worker-thread entry of the structured-format check (syntax-check.ts): parses
 * large content off the dispatcher's event loop and posts back the parser's
 * complaint, or null when the content parses.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { syntaxError } from './syntax-check.js';

const { ext, content } = workerData as { ext: string; content: string };
parentPort?.postMessage((await syntaxError(ext, content)) ?? null);
