/**
 * What a task's command tries on its container's /run/berth (the executor's
 * host directory: the agent's archive, its socket, the task's account
 * files), and the answer it must get on the docker backend whether the
 * executor runs as root or not: every attempt refused.
 */

const RENAMED = ['berth_agent.pyz', 'agent.sock', 'passwd', 'group', 'agent-unavailable', 'state'];
const OVERWRITTEN = ['berth_agent.pyz', 'passwd', 'group'];
/** Names the agent or the executor would trust, and a module beside the agent's archive. */
const PLANTED = ['agent-token', 'resolv.conf', 'sitecustomize.py', 'berth_agent'];

/** The attempts, one line each: `<what> <name>: done|refused`. Run as the task's uid. */
export const HOST_DIR_ATTEMPTS = [
  'cd /run/berth || exit 1',
  `for f in ${RENAMED.join(' ')}; do mv "$f" "$f.moved" 2>/dev/null && echo "rename $f: done" || echo "rename $f: refused"; done`,
  `for f in ${OVERWRITTEN.join(' ')}; do ( : > "$f" ) 2>/dev/null && echo "overwrite $f: done" || echo "overwrite $f: refused"; done`,
  `for f in ${PLANTED.join(' ')}; do ( : > "$f" ) 2>/dev/null && echo "plant $f: done" || echo "plant $f: refused"; done`,
  'ln -s /proc/1/environ agent-token 2>/dev/null && echo "link agent-token: done" || echo "link agent-token: refused"',
  'head -c1 berth_agent.pyz >/dev/null 2>&1 && echo "read berth_agent.pyz: done" || echo "read berth_agent.pyz: refused"',
].join('\n');

/** What {@link HOST_DIR_ATTEMPTS} prints when everything is refused. */
export const HOST_DIR_REFUSALS: readonly string[] = [
  ...RENAMED.map((f) => `rename ${f}: refused`),
  ...OVERWRITTEN.map((f) => `overwrite ${f}: refused`),
  ...PLANTED.map((f) => `plant ${f}: refused`),
  'link agent-token: refused',
  'read berth_agent.pyz: refused',
];

/** Lists `<path> <mode> <uid>` of the directory and what the agent trusts in it. */
export const HOST_DIR_MODES = "stat -c '%n %a %u' /run/berth /run/berth/berth_agent.pyz /run/berth/passwd /run/berth/agent-unavailable";
