/**
 * Read-only tools with an option that runs a program (docs/hermes-compat.md
 * §5.3): `rg --pre`, `rg --hostname-bin`, `sort --compress-program`,
 * `ag --pager`, `man --pager`, `man --html`, `man -P`, `man -H`. The tool
 * looks harmless, so nothing in the pattern table gates it, yet
 * `rg --pre=/tmp/x .` runs `/tmp/x` on every file. Such a command needs
 * approval under upstream's key `arbitrary program execution via {tool} {option}`,
 * and the program itself is inspected as a command of its own, so
 * `man -P 'rm -rf ~' ls` meets the same hardline floor as `rm -rf ~`.
 *
 * The option walk follows the tools' own grammar, as upstream does: an
 * option that takes a value owns the next word, so `rg -e --pre foo` searches
 * for the text `--pre` and runs nothing.
 */

import { analyzeCommand, type CommandAnalysis, type NormalizeOptions } from './normalize.js';

/** A read tool's program-running option, found in one command. */
export interface ReadToolExec {
  readonly tool: ReadTool;
  /** Upstream's spelling of the option (`--pre`, `-P`), whatever prefix the command used. */
  readonly option: string;
  /** What the tool will run: the program, and for tools that hand it to `sh`, the words after it. */
  readonly payload: string;
}

type ReadTool = 'rg' | 'sort' | 'ag' | 'man';

interface ToolGrammar {
  /** Program-running long options, each with the shortest prefix the tool accepts for it. */
  readonly exec: readonly { readonly option: string; readonly minLength: number }[];
  /** Long options that take the next word as their value. */
  readonly withArgument: ReadonlySet<string>;
  /** Short option letters that take a value (case as the tool spells them). */
  readonly shortWithArgument: string;
  /** The tool runs the program through `sh -c` (popen), so the words after it are code too. */
  readonly viaShell: boolean;
}

// Option grammars of ripgrep 14, GNU sort, man-db and ag 2.2 (upstream's
// tables). ripgrep takes no abbreviated long options; getopt/argp tools
// (sort, man, ag) take any unambiguous prefix, which counts here too.
const GRAMMARS: Readonly<Record<ReadTool, ToolGrammar>> = {
  rg: {
    exec: [
      { option: '--pre', minLength: 5 },
      { option: '--hostname-bin', minLength: 14 },
    ],
    withArgument: new Set([
      '--after-context', '--before-context', '--color', '--colors', '--context', '--context-separator',
      '--dfa-size-limit', '--encoding', '--engine', '--field-context-separator', '--field-match-separator',
      '--file', '--generate', '--glob', '--hostname-bin', '--hyperlink-format', '--iglob', '--ignore-file',
      '--max-columns', '--max-count', '--max-depth', '--max-filesize', '--path-separator', '--pre', '--pre-glob',
      '--regex-size-limit', '--regexp', '--replace', '--sort', '--sortr', '--threads', '--type', '--type-add',
      '--type-clear', '--type-not',
    ]),
    shortWithArgument: 'efEmjgdtTABCMr',
    viaShell: false,
  },
  sort: {
    exec: [{ option: '--compress-program', minLength: 5 }],
    withArgument: new Set([
      '--batch-size', '--buffer-size', '--compress-program', '--field-separator', '--files0-from', '--key',
      '--output', '--parallel', '--random-source', '--sort', '--temporary-directory',
    ]),
    shortWithArgument: 'koStT',
    viaShell: false,
  },
  ag: {
    exec: [{ option: '--pager', minLength: 5 }],
    withArgument: new Set([
      '--ackmate-dir-filter', '--color-line-number', '--color-match', '--color-path', '--depth',
      '--filename-pattern', '--file-search-regex', '--ignore', '--ignore-dir', '--max-count', '--pager',
      '--path-to-ignore', '--width', '--workers',
    ]),
    shortWithArgument: 'gGmpW',
    viaShell: true,
  },
  man: {
    exec: [
      { option: '--pager', minLength: 5 },
      { option: '--html', minLength: 4 },
    ],
    withArgument: new Set([
      '--config-file', '--encoding', '--extension', '--locale', '--manpath', '--pager', '--preprocessor',
      '--prompt', '--recode', '--sections', '--systems',
    ]),
    shortWithArgument: 'CRLmMSserEPp',
    viaShell: true,
  },
};

/** How many levels of program-in-program (`man -P 'man -P …'`) are followed. */
const MAX_PAYLOAD_LEVELS = 3;

function isReadTool(name: string): name is ReadTool {
  return Object.hasOwn(GRAMMARS, name);
}

/**
 * The program-running option of the read tool this command variant starts
 * with, if any. Variants are lower-case, so letter case comes from the command
 * as written: man's `-P`/`-H` count only when the command has such a word
 * (`-p` is man's preprocessor option, `-h` its help).
 */
export function findReadToolExec(variant: string, written: string): ReadToolExec | undefined {
  const space = variant.indexOf(' ');
  const head = space === -1 ? variant : variant.slice(0, space);
  const tool = head.slice(head.lastIndexOf('/') + 1);
  if (!isReadTool(tool)) return undefined;
  const words = variant.split(' ');
  const grammar = GRAMMARS[tool];
  const upperP = tool === 'man' && /(?<![^\s'"])-P/.test(written);
  const upperH = tool === 'man' && /(?<![^\s'"])-H/.test(written);
  const args = words.slice(1);
  let i = 0;
  while (i < args.length) {
    const token = args[i] ?? '';
    if (token === '--') break;
    const eq = token.indexOf('=');
    const name = eq === -1 ? token : token.slice(0, eq);
    let value = eq === -1 ? undefined : token.slice(eq + 1);
    let option: string | undefined;
    if (token.startsWith('--')) {
      option = grammar.exec.find((e) => name === e.option || (name.length >= e.minLength && e.option.startsWith(name)))?.option;
    } else if ((upperP && token.startsWith('-p')) || (upperH && token.startsWith('-h'))) {
      option = token.startsWith('-p') ? '-P' : '-H';
      value = token.length > 2 ? token.slice(2) : undefined;
    }
    if (option !== undefined) {
      const attached = value !== undefined;
      if (!attached && i + 1 < args.length) value = args[i + 1];
      if (value !== undefined && value !== '') {
        const at = attached ? i + 1 : i + 2;
        const payload = grammar.viaShell ? [value, ...args.slice(at)].join(' ') : value;
        return { tool, option, payload };
      }
      i += attached ? 1 : 2;
    } else if (token.startsWith('--')) {
      i += eq === -1 && grammar.withArgument.has(name) ? 2 : 1;
    } else if (token.startsWith('-') && token.length > 1) {
      // The first value-taking letter owns the rest of the word, or the next
      // word when it comes last. Lower-case variants cannot tell `-a` from
      // `-A`, so a letter counts as value-taking only when both of its cases
      // do: skipping a word that is really an option could hide `--pre`.
      const letters = token.slice(1);
      const owner = [...letters].findIndex((c) => takesValue(grammar, c));
      i += owner === letters.length - 1 ? 2 : 1;
    } else {
      i++;
    }
  }
  return undefined;
}

function takesValue(grammar: ToolGrammar, letter: string): boolean {
  return grammar.shortWithArgument.includes(letter.toLowerCase()) && grammar.shortWithArgument.includes(letter.toUpperCase());
}

/** The allowlist key upstream reports for a read-tool finding. */
export function readToolKey(found: ReadToolExec): string {
  return `arbitrary program execution via ${found.tool} ${found.option}`;
}

/**
 * The analysis with the programs that read tools would run added as commands
 * of their own (upstream makes each a detection variant), so the hardline
 * floor and the pattern table see what actually runs.
 */
export function withReadToolPrograms(
  analysis: CommandAnalysis,
  written: string,
  options: NormalizeOptions,
  level = 0,
): CommandAnalysis {
  if (level >= MAX_PAYLOAD_LEVELS) return analysis;
  const payloads = new Set<string>();
  for (const variant of analysis.commands) {
    const found = findReadToolExec(variant, written);
    if (found !== undefined) payloads.add(found.payload);
  }
  if (payloads.size === 0) return analysis;
  const commands = new Set(analysis.commands);
  const skeletons = [...analysis.skeletons];
  let incomplete = analysis.incomplete;
  for (const payload of payloads) {
    const nested = withReadToolPrograms(analyzeCommand(payload, options), written, options, level + 1);
    for (const c of nested.commands) commands.add(c);
    skeletons.push(...nested.skeletons);
    incomplete ||= nested.incomplete;
  }
  return { normalized: analysis.normalized, commands: [...commands], skeletons, incomplete };
}
