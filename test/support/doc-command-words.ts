/**
 * What a test must name to run a command block of the docs: for each
 * command, its program, its subcommand, its long flags and the variables it
 * sets. A block marked `<!-- doc-test: covered by PATH -->` is held to it:
 * each of those words appears in PATH's source, or PATH runs the page's
 * block itself (it reads the block with `fencedBlocks('<page>')`).
 *
 * Shell plumbing around the commands (cd, set, export, trap, loops, echo,
 * grep, kill...) is not asked for, nor what `$(...)` runs, nor the lines of
 * a here-document: the words are the commands a reader came for.
 */
import type { FencedBlock } from './markdown-docs.js';
import { parseConsole } from './doc-console.js';

/** Programs that are shell plumbing, not what the block shows. */
const PLUMBING: ReadonlySet<string> = new Set([
  '{', '}', '(', ')', '[', '[[', '!', '.', 'break', 'case', 'cat', 'cd', 'continue', 'cp', 'do', 'done', 'echo', 'else', 'esac',
  'exit', 'export', 'false', 'fi', 'for', 'grep', 'head', 'if', 'install', 'kill', 'ls', 'mkdir', 'mv', 'printf', 'read', 'rm',
  'sed', 'seq', 'set', 'sleep', 'source', 'tail', 'test', 'then', 'tr', 'trap', 'true', 'until', 'wait', 'while',
]);

/** Run another command: the words are that command's. */
const WRAPPERS: ReadonlySet<string> = new Set(['sudo', 'exec', 'env', 'time', 'nohup']);

/** The commands of a block as typed: a console block's `$ ` lines, an sh block's lines without here-documents. */
export function blockCommands(block: FencedBlock): string[] {
  if (block.lang === 'console') return parseConsole(block.body).map((s) => s.command);
  const commands: string[] = [];
  const lines = block.body.split('\n');
  for (let i = 0; i < lines.length; i++) {
    let line = lines[i]!;
    while (line.endsWith('\\') && i + 1 < lines.length) line = `${line.slice(0, -1)} ${lines[++i]!}`;
    commands.push(line);
    const heredoc = /<<-?\s*(['"]?)(\w+)\1/.exec(line);
    if (heredoc) while (i + 1 < lines.length && lines[++i]!.trim() !== heredoc[2]) continue;
  }
  return commands.filter((c) => c.trim() !== '');
}

/** Words of one command line (it may hold several commands: `a && b | c; d &`). */
export function commandWords(line: string): string[] {
  const words: string[] = [];
  for (const simple of splitCommands(tokens(line))) {
    let rest = simple;
    const variables: string[] = [];
    while (rest.length > 0 && /^[A-Za-z_][A-Za-z0-9_]*=/.test(rest[0]!)) {
      variables.push(rest[0]!.slice(0, rest[0]!.indexOf('=')));
      rest = rest.slice(1);
    }
    while (rest.length > 0 && WRAPPERS.has(rest[0]!)) rest = rest.slice(1);
    const [program, ...args] = rest;
    // Variables set for a command, not the shell's own (`pid=$!`).
    if (program === undefined || PLUMBING.has(program) || program.startsWith('$')) continue;
    words.push(...variables, program.slice(program.lastIndexOf('/') + 1));
    const sub = args.find((a) => !a.startsWith('-') && !a.includes('/'));
    if (sub !== undefined && /^[a-z][a-z0-9-]*$/.test(sub)) words.push(sub);
    for (const a of args) if (/^--[a-z]/.test(a)) words.push(a.replace(/=.*$/s, ''));
  }
  return [...new Set(words)];
}

/** Shell words of a line: quotes kept together (and dropped), `$(...)` as one word, a comment cut off, operators on their own. */
function tokens(line: string): string[] {
  const out: string[] = [];
  let word: string | undefined;
  const push = () => {
    if (word !== undefined) out.push(word);
    word = undefined;
  };
  for (let i = 0; i < line.length; i++) {
    const c = line[i]!;
    if (c === "'" || c === '"') {
      const end = line.indexOf(c, i + 1);
      const stop = end < 0 ? line.length : end;
      word = (word ?? '') + line.slice(i + 1, stop);
      i = stop;
    } else if (c === '$' && line[i + 1] === '(') {
      let depth = 0;
      let j = i + 1;
      for (; j < line.length; j++) {
        if (line[j] === '(') depth++;
        else if (line[j] === ')' && --depth === 0) break;
      }
      word = `${word ?? ''}$(…)`;
      i = j;
    } else if (/\s/.test(c)) {
      push();
    } else if (c === '#' && word === undefined) {
      break;
    } else if ('|&;'.includes(c)) {
      push();
      out.push(c);
    } else if (c === '>' || c === '<') {
      // A redirection's target is no argument: skip it with the operator (2>&1, >file, > file).
      if (word !== undefined && /^\d+$/.test(word)) word = undefined;
      push();
      while ('<>&0123456789'.includes(line[i + 1] ?? ' ')) i++;
      while (/\s/.test(line[i + 1] ?? '')) i++;
      while (i + 1 < line.length && !/[\s|&;]/.test(line[i + 1]!)) i++;
    } else {
      word = (word ?? '') + c;
    }
  }
  push();
  return out;
}

function splitCommands(words: string[]): string[][] {
  const commands: string[][] = [[]];
  for (const w of words) {
    if (w === '|' || w === '&' || w === ';') commands.push([]);
    else commands[commands.length - 1]!.push(w);
  }
  return commands.filter((c) => c.length > 0);
}

/** Whether `source` names `word` as a word of its own (not inside a longer name). */
export function namesWord(source: string, word: string): boolean {
  const escaped = word.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  return new RegExp(`(?<![\\w-])${escaped}(?![\\w-])`).test(source);
}

/** Why the test sources do not cover the block's commands: one line per missing word; empty when they do. */
export function uncoveredWords(file: string, block: FencedBlock, sources: readonly string[]): string[] {
  if (sources.some((s) => s.includes(`fencedBlocks('${file}')`))) return [];
  const missing: string[] = [];
  for (const command of blockCommands(block)) {
    for (const word of commandWords(command)) {
      if (!sources.some((s) => namesWord(s, word))) missing.push(`'${word}' of \`${command.split('\n')[0]!.trim()}\``);
    }
  }
  return missing;
}
