/** The `A && B &` rewrite, so a backgrounded server does not hold the foreground. */
import { lexShell, type ShellToken } from '../../../../common/shell/tokens.js';
import { RESERVED_WORDS } from './resolve-command.js';
import type { TerminalGuard } from './terminal-guard.js';

/**
 * Rewrites a trailing `A && B &` to `A && { B & }`; any other command is
 * returned unchanged.
 *
 * Bash binds `&&` tighter than `&`, so `A && B &` backgrounds a subshell that
 * runs A, then B in its foreground, and waits for B. With a server as B that
 * subshell never exits and keeps the output pipe open. The brace group keeps
 * "B only if A succeeded" while backgrounding B alone. Only a top-level `&`
 * that ends the command and follows a top-level `&&` in the same statement
 * is rewritten; quoted text, comments, subshells and existing brace groups
 * are left alone, which also makes the rewrite idempotent.
 */
export function rewriteBackgroundChain(command: string): string {
  const tokens = lexShell(command);
  let lastSignificant = tokens.length - 1;
  while (lastSignificant >= 0) {
    const token = tokens[lastSignificant] as ShellToken;
    if (token.kind !== 'op' || token.op !== '\n') break;
    lastSignificant -= 1;
  }
  const ampersand = tokens[lastSignificant];
  if (ampersand?.kind !== 'op' || ampersand.op !== '&') return command;

  let depth = 0;
  let atCommandStart = true;
  let chainEnd = -1;
  let chainIsAnd = false;
  let previous: ShellToken | undefined;
  for (let i = 0; i < lastSignificant; i += 1) {
    const token = tokens[i] as ShellToken;
    const before = previous;
    previous = token;
    if (token.kind === 'word') {
      if (atCommandStart && !token.redirectTarget && token.value === '{') depth += 1;
      else if (atCommandStart && !token.redirectTarget && token.value === '}') depth = Math.max(0, depth - 1);
      else if (!token.redirectTarget) atCommandStart = RESERVED_WORDS.has(token.value);
      continue;
    }
    if (token.kind === 'redirect') continue;
    atCommandStart = true;
    if (token.op === '(' || token.op === '$(') {
      depth += 1;
    } else if (token.op === ')') {
      depth = Math.max(0, depth - 1);
      atCommandStart = false;
    } else if (depth === 0) {
      if (token.op === '&&' || token.op === '||') {
        chainEnd = token.end;
        chainIsAnd = token.op === '&&';
      } else if (token.op === '\n' && before?.kind === 'op' && ['&&', '||', '|', '|&'].includes(before.op)) {
        // A line break after `&&` or `|` continues the statement.
        previous = before;
      } else if (token.op !== '|' && token.op !== '|&') {
        // `;`, newline or an earlier `&` starts a new statement.
        chainEnd = -1;
      }
    }
  }
  if (depth !== 0 || chainEnd === -1 || !chainIsAnd) return command;
  const body = command.slice(chainEnd, ampersand.start).trim();
  if (body === '') return command;
  return `${command.slice(0, chainEnd)} { ${body} & }${command.slice(ampersand.end)}`;
}

/**
 * Rewrites what will run with {@link rewriteBackgroundChain}, background or
 * not: the foreground hazard check lets a `&` through only when it
 * backgrounds a --help/--version command, and the rewrite keeps the rest of
 * such a chain in the foreground, as in background mode.
 */
export const backgroundChainGuard: TerminalGuard = {
  name: 'background-chain',
  beforeRun(call) {
    call.command = rewriteBackgroundChain(call.command);
    return undefined;
  },
};
