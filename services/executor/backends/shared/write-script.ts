/**
 * The shell script that writes a file where no exec agent runs (docker exec
 * into an image without python3, singularity's per-command helpers): the
 * same atomic write as the agent's and the local backend's. Its stdin goes
 * to a temp file `.NAME.berth-XXXXXX` beside the file (mktemp: exclusive,
 * 0600), which is synced, given the old file's mode (and owner, when the
 * writer may) and renamed over the file, so nobody sees a half-written
 * file. A symlink is written through: the temp file and the rename are
 * beside its target. A new file gets 0666 less the umask, as `cat >` gave
 * it. Any failure removes the temp file (an EXIT trap).
 */

/** The exit codes a backend maps back to errno names. */
export interface WriteScriptExits {
  readonly isDirectory: number;
  readonly notDirectory: number;
  readonly denied: number;
  /** stderr: what it is (`fifo`, `socket`, `character special file`, ...). */
  readonly notRegular: number;
}

/** Symlinks followed before giving up (the kernel's own limit); more is an error (exit 1). */
const MAX_SYMLINK_HOPS = 40;
/** Bytes of the file's name kept in the temp file's name. */
const TEMP_STEM_BYTES = 200;

/** The script, run as `bash -c SCRIPT NAME PATH` with the content on stdin. */
export function atomicWriteScript(exits: WriteScriptExits): string {
  return [
    // Byte-wise ${b:0:N} and English stat -c %F.
    'LC_ALL=C',
    'd=$(dirname -- "$1")',
    `if [ -e "$d" ] && [ ! -d "$d" ]; then exit ${exits.notDirectory}; fi`,
    `mkdir -p -- "$d" 2>/dev/null || exit ${exits.notDirectory}`,
    't=$1; n=0',
    'while [ -L "$t" ]; do',
    `  n=$((n + 1)); [ "$n" -le ${MAX_SYMLINK_HOPS} ] || exit 1`,
    `  l=$(readlink -- "$t") || exit ${exits.denied}`,
    '  case $l in /*) t=$l ;; *) t=${t%/*}/$l ;; esac',
    'done',
    `[ -d "$t" ] && exit ${exits.isDirectory}`,
    'if [ -e "$t" ]; then',
    `  [ -f "$t" ] || { stat -L -c %F -- "$t" >&2; exit ${exits.notRegular}; }`,
    `  [ -w "$t" ] || exit ${exits.denied}`,
    `  m=$(stat -c %a -- "$t") && o=$(stat -c %u:%g -- "$t") || exit ${exits.denied}`,
    'else',
    "  m=$(printf '%o' $(( 0666 & ~$(umask) ))); o=",
    'fi',
    'b=${t##*/}; p=${t%/*}; [ -n "$p" ] || p=/',
    `tmp=$(mktemp -- "$p/.\${b:0:${TEMP_STEM_BYTES}}.berth-XXXXXX" 2>/dev/null) || exit ${exits.denied}`,
    'trap \'rm -f -- "$tmp"\' EXIT',
    `cat > "$tmp" || exit ${exits.denied}`,
    'sync -- "$tmp" 2>/dev/null',
    // Only root (or the owner, for its own groups) may; otherwise the new file is the writer's.
    'if [ -n "$o" ] && [ "$o" != "$(id -u):$(id -g)" ]; then chown -- "$o" "$tmp" 2>/dev/null; fi',
    `chmod -- "$m" "$tmp" && mv -f -- "$tmp" "$t" || exit ${exits.denied}`,
    'trap - EXIT',
  ].join('\n');
}
