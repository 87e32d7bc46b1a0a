/**
 * Upstream's one exemption from the dangerous patterns
 * (`_is_verification_artifact_cleanup`): removing exactly one of the temp
 * scripts a Hermes agent writes to check its work, `rm -f
 * /tmp/hermes-verify-…` or `/tmp/hermes-ad-hoc-…`, is not asked about. An
 * upstream-trained agent ends every verification cycle with that command;
 * asking each time teaches users to approve without reading. Anything more
 * (another flag, a second operand, `sudo`, a chain, another directory or
 * name) is judged as before.
 *
 * Upstream compares against the host's real temp directory and follows
 * symlinks; the dispatcher cannot look inside the sandbox, so the directory
 * is `/tmp` (every Berth sandbox's) as written. A symlink there is harmless:
 * `rm -f` removes the link, not what it points to.
 */
import { posixWords } from './posix-words.js';

const TEMP_DIR = '/tmp';
const ARTIFACT_NAME = /^hermes-(?:verify|ad-hoc)-[A-Za-z0-9_.-]+$/;

export function isVerificationArtifactCleanup(command: string): boolean {
  const argv = posixWords(command);
  if (argv === undefined || argv.length !== 3 || argv[0] !== 'rm' || argv[1] !== '-f') return false;
  const operand = argv[2] ?? '';
  const basename = operand.slice(operand.lastIndexOf('/') + 1);
  return operand === `${TEMP_DIR}/${basename}` && ARTIFACT_NAME.test(basename);
}
