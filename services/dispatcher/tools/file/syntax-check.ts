/**
 * The structured-format gate of write_file and patch: JSON, YAML and TOML
 * content that does not parse is refused before anything is written, with
 * upstream Hermes' text (`tools/file_operations.py`
 * `_fail_closed_syntax_error`, `tools/file_operations_lint.py`).
 *
 * Upstream's `{err}` is Python's parser message; here it is the JavaScript
 * parser's, in the same `Type: message` form. What counts as valid follows
 * upstream: an empty or comment-only YAML or TOML file is valid, empty JSON
 * is not; YAML is checked for syntax only (several documents, unknown tags,
 * repeated keys and undefined aliases pass, as with PyYAML's event parser);
 * JSON accepts `NaN`, `Infinity` and `-Infinity`, as Python's `json` does.
 *
 * Content is at most the 8 MiB an argument can carry, and parsing that much
 * YAML takes seconds, so anything over {@link INLINE_MAX_CHARS} is parsed in
 * a worker thread with memory, stack and time bounds: the dispatcher keeps
 * answering other calls meanwhile. YAML aliases are never expanded: only the
 * document tree is built (an alias stays one node) and nothing is converted
 * to values, where the `yaml` package's `maxAliasCount` would apply, so a
 * "billion laughs" document costs what its text costs.
 */
import { Worker } from 'node:worker_threads';

/** Upstream's fail-closed extensions (`_FAIL_CLOSED_INPROC_EXTS`). */
const STRUCTURED_EXTENSIONS: ReadonlySet<string> = new Set(['.json', '.yaml', '.yml', '.toml']);

/** Up to this many characters the check runs inline (a few milliseconds at most). */
const INLINE_MAX_CHARS = 64 * 1024;
/** A worker still parsing after this long is stopped, and the content refused. */
const WORKER_TIMEOUT_MS = 30_000;
const WORKER_MAX_HEAP_MB = 256;
const WORKER_STACK_MB = 4;

/**
 * A path's extension as Python's `os.path.splitext` gives it (leading dots of
 * the name are not an extension), lower-cased.
 */
export function pythonExtension(path: string): string {
  const name = path.slice(path.lastIndexOf('/') + 1);
  const stem = name.replace(/^\.+/, '');
  const dot = stem.lastIndexOf('.');
  return dot === -1 ? '' : stem.slice(dot).toLowerCase();
}

/** The extension when the path names a format write_file checks, else undefined. */
export function structuredExtension(path: string): string | undefined {
  const ext = pythonExtension(path);
  return STRUCTURED_EXTENSIONS.has(ext) ? ext : undefined;
}

function describeError(err: unknown): string {
  if (err instanceof Error) {
    const type = err.constructor.name === 'Error' ? err.name : err.constructor.name;
    return `${type}: ${err.message.trimEnd()}`;
  }
  return `Error: ${String(err)}`;
}

/**
 * `content` with each bare `NaN`, `Infinity` and `-Infinity` outside strings
 * (numbers to Python's `json`) replaced by a padded `0`, so `1NaN` stays as
 * invalid as Python finds it. One linear pass.
 */
function finiteJson(content: string): string {
  const parts: string[] = [];
  let start = 0;
  let inString = false;
  for (let i = 0; i < content.length; i++) {
    const ch = content[i];
    if (inString) {
      if (ch === '\\') i++;
      else if (ch === '"') inString = false;
      continue;
    }
    if (ch === '"') {
      inString = true;
      continue;
    }
    const token = content.startsWith('NaN', i)
      ? 'NaN'
      : content.startsWith('Infinity', i)
        ? 'Infinity'
        : content.startsWith('-Infinity', i)
          ? '-Infinity'
          : undefined;
    if (token !== undefined) {
      parts.push(content.slice(start, i), ' 0 ');
      i += token.length - 1;
      start = i + 1;
    }
  }
  parts.push(content.slice(start));
  return parts.join('');
}

function jsonSyntaxError(content: string): string | undefined {
  try {
    JSON.parse(content);
    return undefined;
  } catch (err) {
    if (content.includes('NaN') || content.includes('Infinity')) {
      try {
        JSON.parse(finiteJson(content));
        return undefined;
      } catch {
        // Report the original text's error: its positions are the ones the model wrote.
      }
    }
    return describeError(err);
  }
}

// The YAML and TOML parsers load with the first file of their kind: most deployments never write one.
async function yamlSyntaxError(content: string): Promise<string | undefined> {
  const { parseAllDocuments } = await import('yaml');
  try {
    const documents = parseAllDocuments(content, { uniqueKeys: false });
    for (const document of documents) {
      const first = document.errors[0];
      if (first !== undefined) return describeError(first);
    }
    return undefined;
  } catch (err) {
    return describeError(err);
  }
}

async function tomlSyntaxError(content: string): Promise<string | undefined> {
  const { parse: parseToml } = await import('smol-toml');
  try {
    parseToml(content);
    return undefined;
  } catch (err) {
    return describeError(err);
  }
}

/** The parser's complaint about `content` as a file of extension `ext`, or undefined when it parses. */
export async function syntaxError(ext: string, content: string): Promise<string | undefined> {
  switch (ext) {
    case '.json':
      return jsonSyntaxError(content);
    case '.yaml':
    case '.yml':
      return yamlSyntaxError(content);
    case '.toml':
      return tomlSyntaxError(content);
    default:
      return undefined;
  }
}

/** Upstream's refusal text. */
export function syntaxRefusal(path: string, ext: string, err: string): string {
  return (
    `Refusing to write '${path}': candidate content fails ${ext} syntax validation (${err}). The file was NOT ` +
    'created or modified. Fix the content and retry.'
  );
}

function syntaxErrorInWorker(ext: string, content: string): Promise<string | undefined> {
  return new Promise((resolve) => {
    const worker = new Worker(new URL('./syntax-check-worker.js', import.meta.url), {
      workerData: { ext, content },
      resourceLimits: { maxOldGenerationSizeMb: WORKER_MAX_HEAP_MB, stackSizeMb: WORKER_STACK_MB },
    });
    let settled = false;
    const settle = (result: string | undefined): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      void worker.terminate();
      resolve(result);
    };
    const timer = setTimeout(
      () => settle(`TimeoutError: the syntax check did not finish within ${WORKER_TIMEOUT_MS / 1000}s`),
      WORKER_TIMEOUT_MS,
    );
    worker.once('message', (message: unknown) => settle(typeof message === 'string' ? message : undefined));
    // Out of memory or stack while parsing: upstream's parser failing the same way refuses the content too.
    worker.once('error', (err) => settle(describeError(err)));
    worker.once('exit', () => settle('Error: the syntax check stopped without an answer'));
  });
}

/**
 * Upstream's refusal when `content`, to be written at `path` (named as the
 * message should show it), is a JSON, YAML or TOML file that does not parse;
 * undefined when it parses or the format is not checked.
 */
export async function structuredSyntaxRefusal(path: string, content: string): Promise<string | undefined> {
  const ext = structuredExtension(path);
  if (ext === undefined) return undefined;
  const err = content.length <= INLINE_MAX_CHARS ? await syntaxError(ext, content) : await syntaxErrorInWorker(ext, content);
  return err === undefined ? undefined : syntaxRefusal(path, ext, err);
}
