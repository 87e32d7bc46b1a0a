/**
 * The `hermes_tools` Python module execute_code scripts import, and the
 * execute_code tool schema that advertises it. Both are pure builders: the
 * module is generated per call with stubs for the enabled sandbox tools only
 * (spec §6), and the schema lists exactly those and the configured limits.
 *
 * Wire format of a stub call: one line of JSON
 * `{"tool": NAME, "args": {...}, "token": HERMES_RPC_TOKEN}` on the Unix
 * socket at HERMES_RPC_SOCKET; the answer is one line holding the tool's
 * result string (or that string JSON-encoded when it spans several lines),
 * which the stub parses.
 */
import { SANDBOX_TOOLS } from '../../registry/toolsets.js';
import type { ToolSchema } from '../../registry/tool-types.js';

/** One parameter of a stub: its Python name and default (a Python literal), if optional. */
interface StubParam {
  readonly name: string;
  readonly default?: string;
}

interface StubSpec {
  readonly params: readonly StubParam[];
  /** One line for the docstring and the schema description. */
  readonly summary: string;
}

/**
 * The stubs' signatures: the reference module's, parameter for parameter, so
 * scripts written for it call these unchanged. `cross_profile` (Hermes
 * profiles) and `order` are sent along; tools that do not know them ignore them.
 */
const STUBS: Readonly<Record<string, StubSpec>> = {
  web_search: {
    params: [{ name: 'query' }, { name: 'limit', default: '5' }],
    summary: 'Search the web; results in ["data"]["web"], each with "title", "url" and "description".',
  },
  web_extract: {
    params: [{ name: 'urls' }, { name: 'char_limit', default: 'None' }],
    summary: 'Fetch pages (a list of URLs) as text; one entry per URL in ["results"], with "content".',
  },
  read_file: {
    params: [{ name: 'path' }, { name: 'offset', default: '1' }, { name: 'limit', default: '2000' }],
    summary: 'Read a text file with line numbers; the text is in ["content"].',
  },
  write_file: {
    params: [{ name: 'path' }, { name: 'content' }, { name: 'cross_profile', default: 'False' }],
    summary: 'Create or overwrite a file (parent directories are created).',
  },
  search_files: {
    params: [
      { name: 'pattern' },
      { name: 'target', default: '"content"' },
      { name: 'path', default: '"."' },
      { name: 'file_glob', default: 'None' },
      { name: 'limit', default: '50' },
      { name: 'offset', default: '0' },
      { name: 'output_mode', default: '"content"' },
      { name: 'context', default: '0' },
      { name: 'order', default: '"discovery"' },
    ],
    summary: 'Search file contents (regex) or names (target="files"); hits in ["matches"] with "path", "line", "content".',
  },
  patch: {
    params: [
      { name: 'path', default: 'None' },
      { name: 'old_string', default: 'None' },
      { name: 'new_string', default: 'None' },
      { name: 'replace_all', default: 'False' },
      { name: 'mode', default: '"replace"' },
      { name: 'patch', default: 'None' },
      { name: 'cross_profile', default: 'False' },
    ],
    summary: 'Replace old_string with new_string in a file (mode="replace"), or apply a V4A patch (mode="patch").',
  },
  terminal: {
    params: [{ name: 'command' }, { name: 'timeout', default: 'None' }, { name: 'workdir', default: 'None' }],
    summary: 'Run a shell command in the foreground; ["output"] and ["exit_code"]. No background or pty.',
  },
};

/** The helpers every module has, with their signatures as the schema shows them. */
const HELPER_SIGNATURES = ['json_parse(text)', 'shell_quote(s)', 'retry(fn, max_attempts=3, delay=2)'] as const;

/** `name(a, b=1)` for a sandbox tool; throws for names that have no stub. */
export function stubSignature(tool: string): string {
  const spec = STUBS[tool];
  if (spec === undefined) throw new RangeError(`${tool} is not a sandbox tool`);
  const params = spec.params.map((p) => (p.default === undefined ? p.name : `${p.name}=${p.default}`));
  return `${tool}(${params.join(', ')})`;
}

/** The sandbox tools among `tools`, in the spec's order, without duplicates or unknown names. */
export function sandboxToolsIn(tools: Iterable<string>): string[] {
  const wanted = new Set(tools);
  return SANDBOX_TOOLS.filter((name) => wanted.has(name));
}

const MODULE_HEADER = `"""hermes_tools: call Berth tools from an execute_code script.

Generated for this run: only the tools enabled for it are here. Each function
sends one request over the Unix socket in HERMES_RPC_SOCKET and returns the
tool's parsed JSON result. Scripts may use threads (one connection each) and
may fork (the child reconnects).
"""
import json as _json
import os as _os
import shlex as _shlex
import socket as _socket
import threading as _threading
import time as _time

_local = _threading.local()


class HermesToolsError(RuntimeError):
    """The RPC channel itself failed (not the tool: tool errors come back as results)."""


def _connection():
    conn = getattr(_local, "conn", None)
    if conn is not None and getattr(_local, "pid", None) == _os.getpid():
        return conn
    path = _os.environ.get("HERMES_RPC_SOCKET", "")
    if not path:
        raise HermesToolsError("HERMES_RPC_SOCKET is not set: hermes_tools only works inside execute_code")
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError as exc:
        sock.close()
        raise HermesToolsError(f"cannot connect to the tool socket {path}: {exc}") from None
    _local.conn = (sock, sock.makefile("rb"))
    _local.pid = _os.getpid()
    return _local.conn


def _drop_connection():
    conn = getattr(_local, "conn", None)
    _local.conn = None
    if conn is not None:
        try:
            conn[1].close()
            conn[0].close()
        except OSError:
            pass


def _json_or_text(text):
    try:
        return _json.loads(text)
    except ValueError:
        return text


def _decode(line):
    text = line.decode("utf-8", errors="replace").rstrip("\\n")
    try:
        result = _json.loads(text)
    except ValueError:
        return text
    # Results that are not one line arrive JSON-encoded as a string: unwrap them.
    if isinstance(result, str):
        return _json_or_text(result)
    return result


def _call(tool, args):
    args = {k: v for k, v in args.items() if v is not None}
    request = _json.dumps({"tool": tool, "args": args, "token": _os.environ.get("HERMES_RPC_TOKEN", "")})
    sock, reader = _connection()
    try:
        sock.sendall(request.encode("utf-8") + b"\\n")
        line = reader.readline()
    except OSError as exc:
        _drop_connection()
        raise HermesToolsError(f"{tool}: the tool socket failed: {exc}") from None
    if not line.endswith(b"\\n"):
        _drop_connection()
        raise HermesToolsError(f"{tool}: the tool socket closed before the result arrived")
    return _decode(line)


def json_parse(text):
    """json.loads that also accepts control characters inside strings (as tool output often has)
    and a leading UTF-8 byte order mark (as some files and tools prepend)."""
    if isinstance(text, str) and text.startswith("\\ufeff"):
        text = text[1:]
    return _json.loads(text, strict=False)


def shell_quote(s):
    """Quote s as one shell word, for building terminal() commands."""
    return _shlex.quote(str(s))


def retry(fn, max_attempts=3, delay=2):
    """Call fn() until it returns without raising; wait delay, 2*delay, ... seconds between attempts."""
    last = None
    for attempt in range(max_attempts):
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - retrying is the point
            last = exc
            if attempt < max_attempts - 1:
                _time.sleep(delay * (2 ** attempt))
    if last is None:
        raise ValueError("retry: max_attempts must be at least 1")
    raise last
`;

function stubFunction(tool: string): string {
  const spec = STUBS[tool];
  if (spec === undefined) throw new RangeError(`${tool} is not a sandbox tool`);
  const args = spec.params.map((p) => `"${p.name}": ${p.name}`).join(', ');
  return [
    '',
    '',
    `def ${stubSignature(tool)}:`,
    `    """${spec.summary}"""`,
    `    return _call("${tool}", {${args}})`,
  ].join('\n');
}

/**
 * Python source of `hermes_tools.py` with stubs for `tools` (sandbox tools
 * only, in the spec's order; anything else is ignored) and the helpers.
 */
export function buildHermesToolsModule(tools: Iterable<string>): string {
  const enabled = sandboxToolsIn(tools);
  const exported = [...enabled, 'json_parse', 'shell_quote', 'retry', 'HermesToolsError'];
  const all = `\n\n__all__ = [${exported.map((n) => `"${n}"`).join(', ')}]\n`;
  return MODULE_HEADER + enabled.map(stubFunction).join('') + all;
}

/** The configured limits, in the units config uses. */
export interface ExecuteCodeLimits {
  readonly timeoutSec: number;
  readonly maxStdoutBytes: number;
  readonly maxToolCalls: number;
}

/** "5-minute timeout" for 300, "90-second timeout" for 90. */
function describeTimeout(seconds: number): string {
  if (seconds % 60 === 0) return `${seconds / 60}-minute timeout`;
  return `${seconds}-second timeout`;
}

/** "50KB stdout cap" for 50,000 bytes. */
function describeStdoutCap(bytes: number): string {
  const kb = bytes / 1000;
  return `${Number.isInteger(kb) ? kb : kb.toFixed(1)}KB stdout cap`;
}

/** The limits sentence, e.g. "5-minute timeout, 50KB stdout cap, max 50 tool calls per script". */
export function describeLimits(limits: ExecuteCodeLimits): string {
  return (
    `${describeTimeout(limits.timeoutSec)}, ${describeStdoutCap(limits.maxStdoutBytes)}, ` +
    `max ${limits.maxToolCalls} tool calls per script`
  );
}

/**
 * The execute_code schema for the given available tools: one required
 * parameter `code`; the description lists the importable functions (only
 * `tools`' sandbox tools, then the helpers) and the limits.
 */
export function buildExecuteCodeSchema(tools: Iterable<string>, limits: ExecuteCodeLimits): ToolSchema {
  const enabled = sandboxToolsIn(tools);
  const functions = [...enabled.map(stubSignature), ...HELPER_SIGNATURES];
  const toolLines =
    enabled.length > 0
      ? enabled.map((t) => `  ${stubSignature(t)}: ${STUBS[t]?.summary ?? ''}`).join('\n')
      : '  (no tools are enabled for scripts; only the helpers)';
  const description =
    'Run a Python script that calls tools programmatically, so a multi-step workflow takes one turn. ' +
    'Use it for 3+ tool calls with logic between them, for filtering or reducing large tool outputs before ' +
    'they reach you, and for loops and conditional branching. Only what the script prints comes back; ' +
    'intermediate tool results never enter the conversation.\n\n' +
    `Available via \`from hermes_tools import ...\`: ${functions.join(', ')}.\n` +
    `${toolLines}\n` +
    '  json_parse(text): json.loads that tolerates control characters and a leading BOM; shell_quote(s): quote ' +
    'for terminal(); ' +
    'retry(fn, max_attempts=3, delay=2): call fn with exponential backoff.\n' +
    'Each tool function returns the tool\'s parsed JSON result, usually a dict; failures carry a message in ' +
    'result.get("error").\n\n' +
    `Limits: ${describeLimits(limits)}. ` +
    'terminal() is foreground only. Print your final answer to stdout.';
  return {
    name: 'execute_code',
    description,
    parameters: {
      type: 'object',
      properties: {
        code: {
          type: 'string',
          description: 'Python 3 source to run. Import tools with `from hermes_tools import ...`.',
        },
      },
      required: ['code'],
    },
  };
}
