/**
 * Secret redaction of tool output, with the pattern families, masks and
 * switches of upstream hermes-agent's `redact_sensitive_text` (agent/redact.py):
 * vendor-prefixed API keys, `KEY=value` / JSON / YAML / config assignments with
 * credential-looking names (only for env dumps and secret-bearing files),
 * Authorization and API-key headers, Telegram bot tokens, private-key blocks,
 * connection-string passwords, bare-token URL userinfo, JWTs, form bodies and
 * E.164 phone numbers.
 *
 * Masks, as upstream: a long token keeps its first 6 and last 4 characters
 * (`sk-abc...wxyz`), a short one (< 18) becomes `***`; file content
 * (`fileRead`) gets a sentinel that cannot be mistaken for a truncated key
 * (`«redacted:ghp_…»`, `«redacted-secret»`). Private-key blocks become
 * `[REDACTED PRIVATE KEY]`.
 *
 * Every pass is linear in the text: the regexes only start at a literal or at
 * the start of a character run, and the passes whose upstream regex could
 * backtrack over the rest of the text (assignments, quoted values, private-key
 * blocks, connection strings) are scanners instead. The text is already
 * bounded by the tools that call this.
 */

export interface RedactOptions {
  /** Source-preserving mode: the assignment passes (`KEY=value`, JSON, YAML) are skipped. */
  readonly codeFile?: boolean;
  /** File content going to the model: implies `codeFile` and masks with the non-reusable sentinel. */
  readonly fileRead?: boolean;
  /** The source is known to hold secrets (`.env`, a shell rc): the assignment passes run even with `fileRead`. */
  readonly secretFile?: boolean;
}

// ---------------------------------------------------------------------------------------------------------------
// Vendor prefixes. Each entry is a literal prefix and the body after it; the literal is what the sentinel shows.
// ---------------------------------------------------------------------------------------------------------------

/** [literal label, full pattern source], in upstream order: the first alternative that matches wins. */
const PREFIX_PATTERNS: ReadonlyArray<readonly [string, string]> = [
  // Dotted sk- bodies (`sk-sp-…`): each unit is one body char, optionally after a single dot, so `..` ends it.
  ['sk-', 'sk-[A-Za-z0-9_-](?:\\.?[A-Za-z0-9_-]){9,}'],
  ['ghp_', 'ghp_[A-Za-z0-9]{10,}'],
  ['github_pat_', 'github_pat_[A-Za-z0-9_]{10,}'],
  ['gho_', 'gho_[A-Za-z0-9]{10,}'],
  ['ghu_', 'ghu_[A-Za-z0-9]{10,}'],
  ['ghs_', 'ghs_[A-Za-z0-9]{10,}'],
  ['ghr_', 'ghr_[A-Za-z0-9]{10,}'],
  ['xapp-', 'xapp-\\d+-[A-Za-z0-9-]{10,}'],
  ['xox', 'xox[baprs]-[A-Za-z0-9-]{10,}'],
  ['AIza', 'AIza[A-Za-z0-9_-]{30,}'],
  ['pplx-', 'pplx-[A-Za-z0-9]{10,}'],
  ['fal_', 'fal_[A-Za-z0-9_-]{10,}'],
  ['fc-', 'fc-[A-Za-z0-9]{10,}'],
  ['bb_live_', 'bb_live_[A-Za-z0-9_-]{10,}'],
  ['gAAAA', 'gAAAA[A-Za-z0-9_=-]{20,}'],
  ['AKIA', 'AKIA[A-Z0-9]{16}'],
  ['sk_live_', 'sk_live_[A-Za-z0-9]{10,}'],
  ['sk_test_', 'sk_test_[A-Za-z0-9]{10,}'],
  ['rk_live_', 'rk_live_[A-Za-z0-9]{10,}'],
  ['SG', 'SG\\.[A-Za-z0-9_-]{10,}'],
  ['hf_', 'hf_[A-Za-z0-9]{10,}'],
  ['r8_', 'r8_[A-Za-z0-9]{10,}'],
  ['npm_', 'npm_[A-Za-z0-9]{10,}'],
  ['pypi-', 'pypi-[A-Za-z0-9_-]{10,}'],
  ['dop_v1_', 'dop_v1_[A-Za-z0-9]{10,}'],
  ['doo_v1_', 'doo_v1_[A-Za-z0-9]{10,}'],
  ['am_', 'am_(?:org_)?[A-Za-z0-9]{20,}'],
  ['sk_', 'sk_[A-Za-z0-9_]{10,}'],
  ['tvly-', 'tvly-[A-Za-z0-9]{10,}'],
  ['exa_', 'exa_[A-Za-z0-9]{10,}'],
  ['gsk_', 'gsk_[A-Za-z0-9]{10,}'],
  ['syt_', 'syt_[A-Za-z0-9]{10,}'],
  ['retaindb_', 'retaindb_[A-Za-z0-9]{10,}'],
  ['hsk-', 'hsk-[A-Za-z0-9]{10,}'],
  ['mem0_', 'mem0_[A-Za-z0-9]{10,}'],
  ['brv_', 'brv_[A-Za-z0-9]{10,}'],
  ['xai-', 'xai-[A-Za-z0-9]{30,}'],
  ['ntn_', 'ntn_[A-Za-z0-9]{10,}'],
  ['fw-', 'fw-[A-Za-z0-9]{30,}'],
  ['fw_', 'fw_[A-Za-z0-9]{30,}'],
  ['fpk_', 'fpk_[A-Za-z0-9]{30,}'],
  ['glpat-', 'glpat-[A-Za-z0-9_\\-]{10,}'],
  ['gloas-', 'gloas-[A-Za-z0-9_\\-]{10,}'],
  ['gldt-', 'gldt-[A-Za-z0-9_\\-]{10,}'],
  ['glrt-', 'glrt-[A-Za-z0-9_.\\-]{10,}'],
  ['glrtr-', 'glrtr-[A-Za-z0-9_.\\-]{10,}'],
  ['glcbt-', 'glcbt-[A-Za-z0-9_\\-]{10,}'],
  ['glptt-', 'glptt-[A-Za-z0-9_\\-]{10,}'],
  ['glft-', 'glft-[A-Za-z0-9_\\-]{10,}'],
  ['glimt-', 'glimt-[A-Za-z0-9_\\-]{10,}'],
  ['glagent-', 'glagent-[A-Za-z0-9_\\-]{10,}'],
  ['glsoat-', 'glsoat-[A-Za-z0-9_\\-]{10,}'],
  ['glffct-', 'glffct-[A-Za-z0-9_\\-]{10,}'],
  ['glwt-', 'glwt-[A-Za-z0-9_\\-]{10,}'],
  ['GR1348941', 'GR1348941[A-Za-z0-9_\\-]{10,}'],
  ['pk-lf-', 'pk-lf-[A-Za-z0-9\\-]{8,}'],
];

const PREFIX_LABELS: readonly string[] = PREFIX_PATTERNS.map(([label]) => label);

/**
 * A token may not follow a token character, except right after an escape (`\n`, `\u00e9`, `\x41`) in JSON or
 * escaped text, where the preceding letter or hex digit belongs to the escape. No token character may follow.
 */
const PREFIX_SOURCE =
  '(?:(?<![A-Za-z0-9_-])|(?<=\\\\[A-Za-z])|(?<=\\\\u[0-9a-fA-F]{4})|(?<=\\\\x[0-9a-fA-F]{2}))' +
  `(${PREFIX_PATTERNS.map(([, source]) => source).join('|')})(?![A-Za-z0-9_-])`;
const PREFIX_RE = new RegExp(PREFIX_SOURCE, 'g');
const PREFIX_TEST_RE = new RegExp(PREFIX_SOURCE);

/** Control and zero-width characters that can split a token body (`sk-abc\x1bdef`). */
const CONTROL_CHAR_RE = /[\x00-\x1f\x7f\u200b-\u200f\u2028-\u202f\u2060\ufeff]/;
const CONTROL_CHARS_RE = /[\x00-\x1f\x7f\u200b-\u200f\u2028-\u202f\u2060\ufeff]/g;
/** Characters a split token's span may hold besides control characters (no `=`: a KEY=value never joins). */
const TOKEN_BODY_CHAR_RE = /[A-Za-z0-9_.-]/;

/** Zhipu `id.secret` keys: 32 lowercase hex, a dot, 16+ alphanumerics. */
const ZHIPU_RE = /(?<![A-Za-z0-9_.-])([0-9a-f]{32}\.[A-Za-z0-9]{16,})(?![A-Za-z0-9_.-])/g;

// ---------------------------------------------------------------------------------------------------------------
// Masks
// ---------------------------------------------------------------------------------------------------------------

/** Stripped before a secret is shown masked, so a mask never carries line breaks or invisible bytes. */
const DISPLAY_CONTROL_RE = /[\x00-\x1f\x7f\x80-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u2064]/g;

/** Upstream `_mask_token`: 18+ characters keep 6 head and 4 tail around `...`; shorter ones become `***`. */
export function maskToken(token: string): string {
  if (token === '') return '***';
  const chars = Array.from(token.replace(DISPLAY_CONTROL_RE, ''));
  if (chars.length === 0) return '';
  if (chars.length < 18) return '***';
  return `${chars.slice(0, 6).join('')}...${chars.slice(-4).join('')}`;
}

/** Upstream `_mask_token_nonreusable`: the vendor label only, in a form no config file accepts as a key. */
export function maskTokenNonReusable(token: string): string {
  const label = token === '' ? undefined : PREFIX_LABELS.find((prefix) => token.startsWith(prefix));
  return label === undefined ? '«redacted-secret»' : `«redacted:${label}…»`;
}

type Mask = (token: string) => string;

// ---------------------------------------------------------------------------------------------------------------
// Key and value policy shared by the assignment passes
// ---------------------------------------------------------------------------------------------------------------

const KEY_KEYWORD_RE =
  /(?:api|auth|access|refresh|session|secret)[ _.\\-]?(?:key|token)|token|secret|passwd|password|pass|pw|credential|auth|key/gi;
const STRONG_KEY_KEYWORD_RE =
  /(?:api|auth|access|refresh|session|id|bearer)[ _.\\-]?(?:key|token)|key[ _.\\-]?material|secret|passwd|password|pass|pw|credential|auth|bearer/gi;
const PASSWORD_KEY_RE = /passwd|password|pass|pw/gi;
/** A programmatic lookup as the value names a variable; it is not a leaked secret. */
const ENV_LOOKUP_VALUE_RE = /^(?:os\.(?:getenv|environ)|process\.env|\$ENV\{)/;

const isAlpha = (ch: string): boolean => /\p{L}/u.test(ch);
const isUpper = (ch: string): boolean => /\p{Lu}/u.test(ch);
const isLower = (ch: string): boolean => /\p{Ll}/u.test(ch);

function isWordStart(s: string, i: number): boolean {
  if (i === 0) return true;
  const prev = s[i - 1] ?? '';
  const cur = s[i] ?? '';
  if (!isAlpha(prev) || (isUpper(cur) && isLower(prev))) return true;
  return isUpper(cur) && isUpper(prev) && i + 1 < s.length && isLower(s[i + 1] ?? '');
}

function isWordEnd(s: string, j: number, allowPlural = true): boolean {
  if (j >= s.length) return true;
  const cur = s[j] ?? '';
  if (!isAlpha(cur) || (isUpper(cur) && isLower(s[j - 1] ?? ''))) return true;
  return allowPlural && (cur === 's' || cur === 'S') && isWordEnd(s, j + 1, false);
}

/** A keyword counts only at a word boundary: `clientSecret` and `DB_PW` do, `secretary` and `KEYBOARD` do not. */
function hasWordBoundedKeyword(key: string, keywords: RegExp): boolean {
  for (const m of key.matchAll(keywords)) {
    if (isWordStart(key, m.index) && isWordEnd(key, m.index + m[0].length)) return true;
  }
  return false;
}

function looksLikeOpaqueCredential(value: string): boolean {
  if (value === '***' || value.startsWith('«redacted:')) return true;
  const length = Array.from(value).length;
  if (length >= 16 && /^[A-Fa-f0-9]+$/.test(value)) return true;
  if (length >= 20 && /^[A-Za-z0-9_./+=-]+$/.test(value)) return true;
  if (length < 12) return false;
  return [/[a-z]/, /[A-Z]/, /[0-9]/].filter((re) => re.test(value)).length >= 2;
}

/**
 * Whether a value is a `$VAR` / `${VAR}` reference, a `$(` substitution, a `~` path or an absolute path, possibly
 * with more `$VAR` references inside (upstream `_PATH_OR_VAR_VALUE_RE`, as a scanner).
 */
function isPathOrVarValue(value: string): boolean {
  const varRefEnd = (i: number): number => {
    // value[i] === '$'; returns the index after a valid reference, or -1.
    if (value[i + 1] === '{') {
      if (!/[A-Za-z_]/.test(value[i + 2] ?? '')) return -1;
      const close = value.indexOf('}', i + 3);
      return close === -1 ? -1 : close + 1;
    }
    if (!/[A-Za-z_]/.test(value[i + 1] ?? '')) return -1;
    let j = i + 2;
    while (j < value.length && /\w/.test(value[j] ?? '')) j++;
    return j;
  };
  let i: number;
  if (value.startsWith('$(')) i = 2;
  else if (value.startsWith('~') || value.startsWith('/')) i = 1;
  else if (value.startsWith('$')) {
    i = varRefEnd(0);
    if (i === -1) return false;
  } else return false;
  while (i < value.length) {
    const ch = value[i] ?? '';
    if (ch === '$') {
      const end = varRefEnd(i);
      if (end === -1) return false;
      i = end;
    } else if (/[\w./:-]/u.test(ch) || /\p{L}|\p{N}/u.test(ch)) {
      i++;
    } else {
      return false;
    }
  }
  return true;
}

/** A path segment that reads like a secret: 16+ characters, no dot, lower and upper case and digits. */
function isOpaquePathSegment(segment: string): boolean {
  return segment.length >= 16 && !segment.includes('.') && /[a-z]/.test(segment) && /[A-Z]/.test(segment) && /[0-9]/.test(segment);
}

/** Upstream `_should_redact_assignment`. */
function shouldRedactAssignment(key: string, value: string, checkKeyword: boolean): boolean {
  if (ENV_LOOKUP_VALUE_RE.test(value)) return false;
  if (value === '***' || value.startsWith('«redacted')) return false;
  if (checkKeyword && !hasWordBoundedKeyword(key, KEY_KEYWORD_RE)) return false;
  if (isPathOrVarValue(value) && !hasWordBoundedKeyword(key, PASSWORD_KEY_RE)) {
    if (value[0] === '$' || !value.split('/').some(isOpaquePathSegment)) return false;
  }
  return hasWordBoundedKeyword(key, STRONG_KEY_KEYWORD_RE) || looksLikeOpaqueCredential(value);
}

// ---------------------------------------------------------------------------------------------------------------
// Assignment passes (skipped for source code and ordinary file content)
// ---------------------------------------------------------------------------------------------------------------

const SPACE_RE = /\s/;
const isSpace = (ch: string | undefined): boolean => ch !== undefined && SPACE_RE.test(ch);

interface QuotedValue {
  readonly quote: string;
  readonly value: string;
  /** Index after the value (and its closing quote). */
  readonly end: number;
}

/**
 * `(['"]?)(\S+)\2` at `start`: a quoted value ends at the last matching quote of the non-space run; without one
 * the opening quote belongs to the value.
 */
function readEnvValue(text: string, start: number): QuotedValue | undefined {
  let runEnd = start;
  while (runEnd < text.length && !isSpace(text[runEnd])) runEnd++;
  if (runEnd === start) return undefined;
  const first = text[start];
  if ((first === '"' || first === "'") && runEnd - start >= 3) {
    const close = text.lastIndexOf(first, runEnd - 1);
    if (close >= start + 2) return { quote: first, value: text.slice(start + 1, close), end: close + 1 };
  }
  return { quote: '', value: text.slice(start, runEnd), end: runEnd };
}

/**
 * `(['"]?)([^\s&]+?)\2(?=[\s&]|$)` at `start`: a config value, stopping at whitespace or `&`; quoted when a
 * matching quote is directly followed by whitespace, `&` or the end.
 */
function readConfigValue(text: string, start: number): QuotedValue | undefined {
  const isStop = (ch: string | undefined): boolean => ch === undefined || ch === '&' || isSpace(ch);
  let runEnd = start;
  while (runEnd < text.length && !isStop(text[runEnd])) runEnd++;
  const first = text[start];
  if (first === '"' || first === "'") {
    for (let k = start + 2; k < runEnd; k++) {
      if (text[k] === first && isStop(text[k + 1])) return { quote: first, value: text.slice(start + 1, k), end: k + 1 };
    }
  }
  if (runEnd === start) return undefined;
  return { quote: '', value: text.slice(start, runEnd), end: runEnd };
}

/** Rebuilds text from replacements given as [start, end, text], sorted and non-overlapping. */
function splice(text: string, edits: ReadonlyArray<readonly [number, number, string]>): string {
  if (edits.length === 0) return text;
  let out = '';
  let at = 0;
  for (const [start, end, replacement] of edits) {
    out += text.slice(at, start) + replacement;
    at = end;
  }
  return out + text.slice(at);
}

const SECRET_ENV_NAMES = ['API_KEY', 'APIKEY', 'KEY', 'TOKEN', 'SECRET', 'PASSWORD', 'PASSWD', 'PASS', 'PW', 'CREDENTIAL', 'AUTH'];
const LOWER_ENV_KEY_RE = /^[A-Za-z0-9_]+_(?:key|pass|pw|token|secret|password|passwd|credential|auth)$/i;
const isUpperKeyChar = (ch: string | undefined): boolean => ch !== undefined && /[A-Z0-9_]/.test(ch);
const isIdentChar = (ch: string | undefined): boolean => ch !== undefined && /[A-Za-z0-9_]/.test(ch);

/**
 * Where the uppercase env pass's key starts for a key ending at `keyEnd`, or undefined. Upstream's
 * `[A-Z0-9_]{0,50}NAME[A-Z0-9_]{0,50}` takes the leftmost start: at most 50 characters before the first name
 * that ends at most 50 characters before the key's end.
 */
function upperEnvKeyStart(text: string, keyEnd: number, floor: number): number | undefined {
  let runStart = keyEnd;
  while (runStart > floor && isUpperKeyChar(text[runStart - 1])) runStart--;
  const length = keyEnd - runStart;
  // A name must end within 50 characters of the key's end; the longest name has 10 characters.
  for (let a = Math.max(0, length - 60); a < length; a++) {
    const fits = SECRET_ENV_NAMES.some(
      (name) => text.startsWith(name, runStart + a) && length - (a + name.length) <= 50 && a + name.length <= length,
    );
    if (fits) return runStart + Math.max(0, a - 50);
  }
  return undefined;
}

/**
 * `KEY=value` assignments. `upper`: a secret name anywhere in an all-caps key, spaces allowed around `=`.
 * `lower`: a whole identifier ending in `_` and a secret name (`openai_key=...`). A match whose value passes the
 * policy is rewritten `KEY=<mask>` (the spacing dropped, as upstream).
 */
function redactEnvAssignments(text: string, mask: Mask, mode: 'upper' | 'lower'): string {
  const edits: Array<readonly [number, number, string]> = [];
  let floor = 0;
  for (let eq = text.indexOf('='); eq !== -1; eq = text.indexOf('=', Math.max(eq + 1, floor))) {
    let keyEnd = eq;
    while (keyEnd > floor && isSpace(text[keyEnd - 1])) keyEnd--;
    let keyStart: number | undefined;
    if (mode === 'upper') {
      keyStart = upperEnvKeyStart(text, keyEnd, floor);
    } else {
      let runStart = keyEnd;
      while (runStart > floor && isIdentChar(text[runStart - 1])) runStart--;
      // The identifier must start here (upstream's lookbehind), not inside a longer one.
      const whole = runStart === 0 || !isIdentChar(text[runStart - 1]);
      if (whole && runStart < keyEnd && LOWER_ENV_KEY_RE.test(text.slice(runStart, keyEnd))) keyStart = runStart;
    }
    if (keyStart === undefined) continue;
    let valueStart = eq + 1;
    while (valueStart < text.length && isSpace(text[valueStart])) valueStart++;
    const parsed = readEnvValue(text, valueStart);
    if (parsed === undefined) continue;
    const key = text.slice(keyStart, keyEnd);
    if (shouldRedactAssignment(key, parsed.value, true)) {
      edits.push([keyStart, parsed.end, `${key}=${parsed.quote}${mask(parsed.value)}${parsed.quote}`]);
    }
    floor = parsed.end;
  }
  return splice(text, edits);
}

/** The rewrite in the two-pass form upstream applies (first pass's masks are seen by the second). */
function redactEnvPasses(text: string, mask: Mask): string {
  text = redactEnvAssignments(text, mask, 'upper');
  if (!text.includes('://')) text = redactEnvAssignments(text, mask, 'lower');
  return text;
}

const CFG_SECRET_WORD_RE = /api[ _.-]?key|token|secret|passwd|password|credential|auth/i;
const CFG_NAME_IN_KEY_RE = /api[_.-]?key|token|secret|passwd|password|credential|auth/gi;
const isDottedKeyChar = (ch: string | undefined): boolean => ch !== undefined && /[A-Za-z0-9_.-]/.test(ch);

/** Upstream `_CFG_DOTTED_RE`'s key test: a namespaced key (a dot before or after the secret word). */
function isDottedSecretKey(key: string): boolean {
  const firstDot = key.indexOf('.');
  if (firstDot >= 1 && CFG_SECRET_WORD_RE.test(key.slice(firstDot + 1))) return true;
  for (const m of key.matchAll(CFG_NAME_IN_KEY_RE)) {
    const dot = key.indexOf('.', m.index + m[0].length);
    if (dot !== -1 && dot <= key.length - 2) return true;
  }
  return false;
}

/** `spring.datasource.password=x`: a namespaced key directly before `=`, value up to whitespace or `&`. */
function redactDottedConfig(text: string, mask: Mask): string {
  const edits: Array<readonly [number, number, string]> = [];
  let floor = 0;
  for (let eq = text.indexOf('='); eq !== -1; eq = text.indexOf('=', Math.max(eq + 1, floor))) {
    let keyStart = eq;
    while (keyStart > floor && isDottedKeyChar(text[keyStart - 1])) keyStart--;
    if (keyStart === eq || (keyStart > 0 && isDottedKeyChar(text[keyStart - 1]))) continue;
    const key = text.slice(keyStart, eq);
    if (!isDottedSecretKey(key)) continue;
    const parsed = readConfigValue(text, eq + 1);
    if (parsed === undefined) continue;
    if (shouldRedactAssignment(key, parsed.value, true)) {
      edits.push([keyStart, parsed.end, `${key}=${parsed.quote}${mask(parsed.value)}${parsed.quote}`]);
    }
    floor = parsed.end;
  }
  return splice(text, edits);
}

/**
 * The rendered line prefix of read_file (`5|`), grep -n (`6:`), grep context (`7-`) and cat -n (`   8\t`),
 * after leading blanks: returns where the key may start, trying with and without the gutter.
 */
function linePrefixStarts(line: string, allowExport: boolean): number[] {
  let i = 0;
  while (line[i] === ' ' || line[i] === '\t') i++;
  const starts: number[] = [];
  let g = i;
  while (g < line.length && line[g]! >= '0' && line[g]! <= '9') g++;
  if (g > i && (line[g] === '|' || line[g] === ':' || line[g] === '-' || line[g] === '\t')) {
    g++;
    while (line[g] === ' ' || line[g] === '\t') g++;
    starts.push(g);
  }
  starts.push(i);
  if (!allowExport) return starts;
  const withExport: number[] = [];
  for (const s of starts) {
    const m = /^export[ \t]+/.exec(line.slice(s, s + 64));
    if (m !== null) {
      let e = s + 6;
      while (line[e] === ' ' || line[e] === '\t') e++;
      withExport.push(e);
    }
    withExport.push(s);
  }
  return withExport;
}

/** Lines of a text with their offsets (split on \n, \r\n and \r, as `^` under MULTILINE sees them). */
function* linesOf(text: string): Generator<readonly [number, string]> {
  let start = 0;
  for (let i = 0; i <= text.length; i++) {
    const ch = text[i];
    if (i === text.length || ch === '\n' || ch === '\r') {
      yield [start, text.slice(start, i)];
      start = i + 1;
    }
  }
}

const isAnchoredKeyChar = (ch: string | undefined): boolean => ch !== undefined && /[A-Za-z0-9_-]/.test(ch);

/** `password=x` / `export api_key=x` at the start of a line (after a rendered gutter). */
function redactAnchoredConfig(text: string, mask: Mask): string {
  const edits: Array<readonly [number, number, string]> = [];
  for (const [offset, line] of linesOf(text)) {
    for (const keyStart of linePrefixStarts(line, true)) {
      let keyEnd = keyStart;
      while (isAnchoredKeyChar(line[keyEnd])) keyEnd++;
      if (line[keyEnd] !== '=' || !CFG_SECRET_WORD_RE.test(line.slice(keyStart, keyEnd))) continue;
      const parsed = readConfigValue(line, keyEnd + 1);
      if (parsed === undefined) continue;
      const key = line.slice(0, keyEnd);
      if (shouldRedactAssignment(key, parsed.value, true)) {
        edits.push([offset, offset + parsed.end, `${key}=${parsed.quote}${mask(parsed.value)}${parsed.quote}`]);
      }
      break;
    }
  }
  return splice(text, edits);
}

const YAML_NAME_RE = /api[ _.-]?key|token|secret|passwd|password|credential/i;

/** `password: secret` at the start of a line: an unquoted, whitespace-free value. */
function redactYamlAssignments(text: string, mask: Mask): string {
  const edits: Array<readonly [number, number, string]> = [];
  for (const [offset, line] of linesOf(text)) {
    for (const keyStart of linePrefixStarts(line, false)) {
      let keyEnd = keyStart;
      while (isDottedKeyChar(line[keyEnd])) keyEnd++;
      if (line[keyEnd] !== ':' || !YAML_NAME_RE.test(line.slice(keyStart, keyEnd))) continue;
      let valueStart = keyEnd + 1;
      while (line[valueStart] === ' ' || line[valueStart] === '\t') valueStart++;
      const first = line[valueStart];
      if (first === undefined || first === '"' || first === "'" || first === '&' || isSpace(first)) break;
      let valueEnd = valueStart;
      while (valueEnd < line.length && line[valueEnd] !== '&' && !isSpace(line[valueEnd])) valueEnd++;
      const key = line.slice(0, keyEnd);
      const value = line.slice(valueStart, valueEnd);
      if (shouldRedactAssignment(key, value, true)) {
        edits.push([offset, offset + valueEnd, `${key}${line.slice(keyEnd, valueStart)}${mask(value)}`]);
      }
      break;
    }
  }
  return splice(text, edits);
}

const JSON_KEY_NAMES =
  '(?:api_?[Kk]ey|token|secret|password|access_token|refresh_token|auth_token|bearer|secret_value|raw_secret|secret_input|key_material)';
const JSON_FIELD_RE = new RegExp(`("${JSON_KEY_NAMES}")\\s*:\\s*"([^"]+)"`, 'gi');
/** The same field inside a JSON-encoded string; the escape depth is checked in code (see below). */
const JSON_FIELD_ESCAPED_RE = new RegExp(
  `(?<!\\\\)(\\\\+)"(${JSON_KEY_NAMES})(\\\\+)"\\s*:\\s*(\\\\+)"([^"\\\\]+)(\\\\+)"`,
  'gi',
);

/** `"apiKey": "value"`, also escaped inside a JSON string (`{\"token\": \"...\"}`). */
function redactJsonFields(text: string, mask: Mask): string {
  text = text.replace(JSON_FIELD_RE, (whole: string, key: string, value: string) =>
    shouldRedactAssignment(key, value, false) ? `${key}: "${mask(value)}"` : whole,
  );
  if (text.includes('\\"')) {
    text = text.replace(
      JSON_FIELD_ESCAPED_RE,
      (whole: string, lead: string, name: string, close: string, open: string, value: string, end: string) => {
        // Upstream matches where the key's and value's escape depths agree; the extra leading backslashes stay.
        const depth = close.length;
        if (lead.length < depth || open.length !== depth || end.length !== depth) return whole;
        const escape = close;
        const key = `${escape}"${name}${escape}"`;
        if (!shouldRedactAssignment(key, value, false)) return whole;
        return `${lead.slice(depth)}${key}: ${escape}"${mask(value)}${escape}"`;
      },
    );
  }
  return text;
}

// Python mapping repr fields: {'BRAVE_API_KEY': 'value'}.
const PYTHON_REPR_SECRET_KEYS: ReadonlySet<string> = new Set([
  'access_token', 'refresh_token', 'id_token', 'auth_token', 'token', 'api_key', 'apikey', 'client_secret', 'secret',
  'password', 'passwd', 'private_key', 'credential', 'credentials', 'authorization', 'bearer', 'secret_value',
  'raw_secret', 'secret_input', 'key_material',
]);
const PYTHON_REPR_ENV_SUFFIXES = ['_API_KEY', '_TOKEN', '_SECRET', '_PASSWORD', '_PASSWD', '_CREDENTIAL', '_CREDENTIALS'];
const PYTHON_REPR_CREDENTIAL_SUFFIXES = ['apikey', 'api_key', 'token', 'secret', 'password', 'passwd', 'credential', 'credentials'];
const PYTHON_REPR_HEAD_RE = /'([A-Za-z_][A-Za-z0-9_]*)'(\s*:\s*)([bB]?)(['"])/g;

function isPythonReprSecretKey(key: string): boolean {
  const folded = key.toLowerCase();
  if (PYTHON_REPR_SECRET_KEYS.has(folded)) return true;
  if (/[A-Z]/.test(key) && key === key.toUpperCase() && PYTHON_REPR_ENV_SUFFIXES.some((s) => key.endsWith(s))) return true;
  return PYTHON_REPR_CREDENTIAL_SUFFIXES.some((s) => folded.endsWith(s));
}

/** Where a Python string body starting at `from` ends (its closing quote), honouring backslash escapes; -1 if open. */
function closingQuote(text: string, from: number, quote: string): number {
  for (let i = from; i < text.length; i++) {
    const ch = text[i];
    if (ch === '\\') i++;
    else if (ch === quote) return i;
  }
  return -1;
}

/** Fully masks credential fields in Python mapping reprs (no head or tail kept: escapes could split). */
function redactPythonReprFields(text: string): string {
  const edits: Array<readonly [number, number, string]> = [];
  // Open strings are remembered so an unterminated quote is scanned once, not once per field that starts in it.
  const openFrom = new Map<string, number>();
  PYTHON_REPR_HEAD_RE.lastIndex = 0;
  for (let m = PYTHON_REPR_HEAD_RE.exec(text); m !== null; m = PYTHON_REPR_HEAD_RE.exec(text)) {
    const [head, key = '', sep = '', prefix = '', quote = "'"] = m;
    const bodyStart = m.index + head.length;
    const known = openFrom.get(quote);
    const close = known !== undefined && bodyStart >= known ? -1 : closingQuote(text, bodyStart, quote);
    if (close === -1) openFrom.set(quote, Math.min(known ?? bodyStart, bodyStart));
    if (close <= bodyStart) {
      PYTHON_REPR_HEAD_RE.lastIndex = m.index + 1;
      continue;
    }
    PYTHON_REPR_HEAD_RE.lastIndex = close + 1;
    const value = text.slice(bodyStart, close);
    if (!isPythonReprSecretKey(key) || ENV_LOOKUP_VALUE_RE.test(value)) continue;
    if (value.includes('***') || value.startsWith('«redacted:')) continue;
    edits.push([m.index, close + 1, `'${key}'${sep}${prefix}${quote}***${quote}`]);
  }
  return splice(text, edits);
}

/** Upstream `_redact_assignments`: each pass behind the substring gate its pattern needs. */
function redactAssignments(text: string, nonReusable: boolean): string {
  const mask = nonReusable ? maskTokenNonReusable : maskToken;
  if (text.includes('=')) {
    text = redactEnvPasses(text, mask);
    if (!text.includes('://') && CFG_SECRET_WORD_RE.test(text)) {
      text = redactDottedConfig(text, mask);
      text = redactAnchoredConfig(text, mask);
    }
  }
  if (text.includes(':') && text.includes('"')) text = redactJsonFields(text, mask);
  if (text.includes(':') && text.includes("'")) text = redactPythonReprFields(text);
  if (text.includes(':') && !text.includes('://')) text = redactYamlAssignments(text, mask);
  return text;
}

// ---------------------------------------------------------------------------------------------------------------
// Headers, tokens, keys and URLs
// ---------------------------------------------------------------------------------------------------------------

/** Authorization / Proxy-Authorization: the header name and scheme word are kept, the credential masked. */
const AUTH_HEADER_RE = /((?:Proxy-)?Authorization:\s*)([A-Za-z][\w.+-]*\s+)?([^\s"']+)/gi;
const SECRET_HEADER_RE = /((?:x-api-key|x-goog-api-key|api-key|apikey|x-api-token|x-auth-token|x-access-token)\s*:\s*)(\S+)/gi;
/** Telegram bot tokens, `[bot]<digits>:<30+ token chars>`. */
const TELEGRAM_RE = /(?<!\d)(bot)?(\d{8,}):([-A-Za-z0-9_]{30,})/g;
const PRIVATE_KEY_BEGIN_RE = /-----BEGIN[A-Z ]*PRIVATE KEY-----/g;
const PRIVATE_KEY_END_RE = /-----END[A-Z ]*PRIVATE KEY-----/g;
/** Database URL up to the password: `scheme://user:`. The password runs to the next `@` (found by a scanner). */
const DB_CONNSTR_HEAD_RE = /(?:postgres(?:ql)?|mysql|mongodb(?:\+srv)?|redis|amqp):\/\/[^:\s]+:/gi;
/** `scheme://TOKEN@host`: a bare credential in the userinfo (`user:pass@` passes, as upstream). */
const URL_BARE_TOKEN_RE = /((?:https?|wss?|git|ssh|ftp|ftps|sftp):\/\/)([^\s:@/]{8,})(@\S+)/gi;
const JWT_RE = /eyJ[A-Za-z0-9_-]{10,}(?:\.[A-Za-z0-9_=-]{4,}){0,2}/g;
/** E.164 phone numbers; the lookahead spares hex strings and identifiers. */
const PHONE_RE = /(\+[1-9]\d{6,14})(?![A-Za-z0-9])/g;
const FORM_BODY_RE = /^[A-Za-z_][A-Za-z0-9_.-]*=[^&\s]*(?:&[A-Za-z_][A-Za-z0-9_.-]*=[^&\s]*)+$/;
const SENSITIVE_QUERY_PARAMS: ReadonlySet<string> = new Set([
  'access_token', 'refresh_token', 'id_token', 'token', 'api_key', 'apikey', 'client_secret', 'password', 'auth',
  'jwt', 'session', 'secret', 'key', 'code', 'signature', 'x-amz-signature', 'x-goog-signature', 'sig',
]);

/** Whole `-----BEGIN … PRIVATE KEY-----` … `-----END … PRIVATE KEY-----` blocks. */
function redactPrivateKeys(text: string): string {
  const edits: Array<readonly [number, number, string]> = [];
  PRIVATE_KEY_BEGIN_RE.lastIndex = 0;
  for (let begin = PRIVATE_KEY_BEGIN_RE.exec(text); begin !== null; begin = PRIVATE_KEY_BEGIN_RE.exec(text)) {
    PRIVATE_KEY_END_RE.lastIndex = begin.index + begin[0].length;
    const end = PRIVATE_KEY_END_RE.exec(text);
    if (end === null) break; // no footer after this header, so none after any later header either
    edits.push([begin.index, end.index + end[0].length, '[REDACTED PRIVATE KEY]']);
    PRIVATE_KEY_BEGIN_RE.lastIndex = end.index + end[0].length;
  }
  return splice(text, edits);
}

/** Connection-string passwords (`postgres://user:***@host`) and bare-token userinfo. */
function redactUrlCredentials(text: string, codeFile: boolean): string {
  const edits: Array<readonly [number, number, string]> = [];
  // The first `@` or whitespace at or after a position; reused while positions stay before it (linear overall).
  let stopFrom = -1;
  let stopAt = -1;
  const nextStop = (from: number): number => {
    if (from >= stopFrom && from <= stopAt) return stopAt;
    stopFrom = from;
    const rest = /[@\s]/g;
    rest.lastIndex = from;
    const hit = rest.exec(text);
    stopAt = hit === null ? text.length : hit.index;
    return stopAt;
  };
  DB_CONNSTR_HEAD_RE.lastIndex = 0;
  for (let head = DB_CONNSTR_HEAD_RE.exec(text); head !== null; head = DB_CONNSTR_HEAD_RE.exec(text)) {
    const pwStart = head.index + head[0].length;
    const stop = nextStop(pwStart);
    if (stop === pwStart || text[stop] !== '@') {
      DB_CONNSTR_HEAD_RE.lastIndex = head.index + 1;
      continue;
    }
    const password = text.slice(pwStart, stop);
    // In source code a `{...}` password is an f-string template, not a literal credential.
    if (!(codeFile && password.startsWith('{') && password.endsWith('}'))) edits.push([pwStart, stop, '***']);
    DB_CONNSTR_HEAD_RE.lastIndex = stop + 1;
  }
  text = splice(text, edits);
  return text.replace(URL_BARE_TOKEN_RE, (_whole, scheme: string, token: string, rest: string) => `${scheme}${maskToken(token)}${rest}`);
}

/** A whole `k=v&k=v` body: values of credential-named parameters become `***`. */
function redactFormBody(text: string): string {
  if (text.includes('\n') || !text.includes('&')) return text;
  const body = text.trim();
  if (!FORM_BODY_RE.test(body)) return text;
  return body
    .split('&')
    .map((pair) => {
      const eq = pair.indexOf('=');
      return eq !== -1 && SENSITIVE_QUERY_PARAMS.has(pair.slice(0, eq).toLowerCase()) ? `${pair.slice(0, eq)}=***` : pair;
    })
    .join('&');
}

function maskPhone(phone: string): string {
  const keep = phone.length <= 8 ? 2 : 4;
  return `${phone.slice(0, keep)}****${phone.slice(-keep)}`;
}

/**
 * Tokens whose body is split by control or zero-width characters (`ghp_abc\n123…`): matched on a copy without
 * them, masked in the original only when the span holds token and control characters alone.
 */
function maskControlSplitTokens(text: string, mask: Mask): string {
  const stripped = text.replace(CONTROL_CHARS_RE, '');
  if (stripped.length === text.length) return text;
  const originalIndex = new Int32Array(stripped.length);
  let j = 0;
  for (let i = 0; i < text.length; i++) {
    if (!CONTROL_CHAR_RE.test(text[i] ?? '')) originalIndex[j++] = i;
  }
  const edits: Array<readonly [number, number, string]> = [];
  PREFIX_RE.lastIndex = 0;
  for (const m of stripped.matchAll(PREFIX_RE)) {
    const token = m[1] ?? '';
    const startOrig = originalIndex[m.index] ?? 0;
    const endOrig = (originalIndex[m.index + token.length - 1] ?? 0) + 1;
    const span = text.slice(startOrig, endOrig);
    // A whole token on one line followed by text on the next must not swallow that text.
    if ((span.includes('\n') || span.includes('\r')) && PREFIX_TEST_RE.test(span)) continue;
    const onlyTokenChars = Array.from(span).every((ch) => TOKEN_BODY_CHAR_RE.test(ch) || CONTROL_CHAR_RE.test(ch));
    if (onlyTokenChars && text[endOrig] !== '=') edits.push([startOrig, endOrig, mask(token)]);
  }
  return splice(text, edits);
}

// ---------------------------------------------------------------------------------------------------------------
// Entry point
// ---------------------------------------------------------------------------------------------------------------

/**
 * Upstream `redact_sensitive_text` with redaction on (callers check the switch): every pattern family applied
 * in upstream's order, each behind the cheap substring test its pattern needs.
 */
export function redactSensitiveText(text: string, options: RedactOptions = {}): string {
  if (text === '') return text;
  const fileRead = options.fileRead === true;
  const secretFile = options.secretFile === true;
  const codeFile = (options.codeFile === true || fileRead) && !secretFile;
  const tokenMask: Mask = fileRead ? maskTokenNonReusable : maskToken;

  if (PREFIX_LABELS.some((prefix) => text.includes(prefix))) {
    text = maskControlSplitTokens(text, tokenMask);
    text = text.replace(PREFIX_RE, (_whole, token: string) => tokenMask(token));
  }
  if (text.includes('.')) text = text.replace(ZHIPU_RE, (_whole, token: string) => tokenMask(token));
  if (!codeFile) text = redactAssignments(text, fileRead);
  if (text.includes('uthorization') || text.includes('UTHORIZATION')) {
    text = text.replace(AUTH_HEADER_RE, (_w, name: string, scheme: string | undefined, credential: string) =>
      `${name}${scheme ?? ''}${maskToken(credential)}`,
    );
  }
  if (text.includes(':')) {
    text = text.replace(SECRET_HEADER_RE, (_w, name: string, value: string) => `${name}${maskToken(value)}`);
    text = text.replace(TELEGRAM_RE, (_w, bot: string | undefined, id: string) => `${bot ?? ''}${id}:***`);
  }
  if (text.includes('BEGIN') && text.includes('-----')) text = redactPrivateKeys(text);
  if (text.includes('://')) text = redactUrlCredentials(text, codeFile);
  if (text.includes('eyJ')) text = text.replace(JWT_RE, (token) => maskToken(token));
  if (text.includes('&') && text.includes('=')) text = redactFormBody(text);
  if (text.includes('+')) text = text.replace(PHONE_RE, (_w, phone: string) => maskPhone(phone));
  return text;
}

/** Pytest introspection lines (`E       …`) and final Python exception lines, where reprs of secrets show up. */
const PYTEST_DIAGNOSTIC_LINE_RE = /^([ \t]*E[ \t]{2,})([^]*)$/;
const PYTHON_EXCEPTION_LINE_RE = /^((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Warning):[ \t]*)([^]*)$/;

/** Upstream `_redact_python_diagnostic_repr_fields`: the repr pass on diagnostic lines only. */
export function redactPythonDiagnosticLines(text: string): string {
  const edits: Array<readonly [number, number, string]> = [];
  for (const [offset, line] of linesOf(text)) {
    const m = PYTEST_DIAGNOSTIC_LINE_RE.exec(line) ?? PYTHON_EXCEPTION_LINE_RE.exec(line);
    if (m === null) continue;
    const prefix = m[1] ?? '';
    const body = m[2] ?? '';
    const redacted = redactPythonReprFields(body);
    if (redacted !== body) edits.push([offset + prefix.length, offset + line.length, redacted]);
  }
  return splice(text, edits);
}
