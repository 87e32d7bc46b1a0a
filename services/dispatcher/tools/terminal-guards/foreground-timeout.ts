/** The cap on a foreground command's timeout. */

/** Returns the error for a foreground timeout above the configured cap, or null. */
export function validateForegroundTimeout(timeoutSec: number, maxSec: number): string | null {
  if (timeoutSec <= maxSec) return null;
  return (
    `Foreground timeout ${timeoutSec}s exceeds the maximum of ${maxSec}s. ` +
    'Use background=true with notify_on_complete=true for long-running commands.'
  );
}
