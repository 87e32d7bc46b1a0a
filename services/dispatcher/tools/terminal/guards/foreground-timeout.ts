/** A terminal call's timeout: read, checked, and over the cap turned into a background run. */
import { refusal, type TerminalGuard } from './terminal-guard.js';

/** Upstream's answer to a timeout of zero or less (any call, background included). */
export function nonPositiveTimeoutError(timeout: number): string {
  return `timeout must be a positive number of seconds (got ${timeout}).`;
}

/**
 * Reads the call's `timeout` (whole seconds; a fractional value is rounded
 * up so the command gets at least what was asked). Zero or less is refused
 * with upstream's text for every call. A foreground timeout above `maxSec`
 * is not refused: the call is marked to run as a tracked background process
 * with notify (upstream promotes it, since a refusal only bought a retry).
 * Something that is not a number is refused in the terminal's shape.
 */
export function foregroundTimeoutGuard(maxSec: number): TerminalGuard {
  return {
    name: 'foreground-timeout',
    beforeRun(call) {
      const raw = call.args.timeout;
      if (raw === undefined || raw === null) return undefined;
      if (typeof raw !== 'number' || !Number.isFinite(raw)) {
        return refusal(
          `Invalid timeout: expected a positive integer number of seconds, got ${JSON.stringify(raw) ?? String(raw)}`,
          'error',
        );
      }
      if (raw <= 0) return JSON.stringify({ error: nonPositiveTimeoutError(raw) });
      if (call.background) return undefined;
      call.timeoutSec = Math.ceil(raw);
      if (call.timeoutSec > maxSec) call.promotedFromTimeoutSec = call.timeoutSec;
      return undefined;
    },
  };
}
