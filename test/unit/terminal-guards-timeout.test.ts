import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { validateForegroundTimeout } from '../../services/dispatcher/tools/terminal-guards/foreground-timeout.js';

void describe('validateForegroundTimeout', () => {
  void it('accepts timeouts up to the maximum', () => {
    assert.equal(validateForegroundTimeout(1, 600), null);
    assert.equal(validateForegroundTimeout(600, 600), null);
  });

  void it('refuses a timeout over the maximum with the protocol message', () => {
    assert.equal(
      validateForegroundTimeout(601, 600),
      'Foreground timeout 601s exceeds the maximum of 600s. Use background=true with notify_on_complete=true for long-running commands.',
    );
  });

  void it('names the configured maximum', () => {
    assert.equal(
      validateForegroundTimeout(1000, 900),
      'Foreground timeout 1000s exceeds the maximum of 900s. Use background=true with notify_on_complete=true for long-running commands.',
    );
  });
});
