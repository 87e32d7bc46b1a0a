/**
 * The readable text of an HTML page, as light markdown: headings, paragraphs,
 * list items, links, code blocks and emphasis kept; scripts, styles,
 * navigation, forms and other chrome dropped; `<main>`/`<article>` preferred
 * over the whole body when present. A single forward scan over the input (no
 * backtracking regexes), since the page is hostile input.
 */

export interface ReadableText {
  readonly title: string;
  readonly markdown: string;
}

/** Elements dropped with everything inside them. */
const DROPPED = new Set([
  'script', 'style', 'noscript', 'template', 'svg', 'math', 'iframe', 'object', 'embed', 'canvas', 'head',
  'nav', 'footer', 'aside', 'form', 'button', 'select', 'dialog', 'textarea',
]);
/** Elements that never have an end tag. */
const VOID = new Set(['area', 'base', 'br', 'col', 'embed', 'hr', 'img', 'input', 'link', 'meta', 'param', 'source', 'track', 'wbr']);
const BLOCK = new Set([
  'p', 'div', 'section', 'article', 'main', 'header', 'blockquote', 'table', 'thead', 'tbody', 'tfoot', 'tr',
  'ul', 'ol', 'dl', 'dt', 'dd', 'figure', 'figcaption', 'address', 'details', 'summary', 'body', 'html', 'center',
]);

const NAMED_ENTITIES: Readonly<Record<string, string>> = {
  amp: '&', lt: '<', gt: '>', quot: '"', apos: "'", nbsp: ' ', mdash: '—', ndash: '–', hellip: '…', copy: '©',
  reg: '®', trade: '™', laquo: '«', raquo: '»', lsquo: '‘', rsquo: '’', ldquo: '“', rdquo: '”', bull: '•',
  middot: '·', times: '×', divide: '÷', deg: '°', euro: '€', pound: '£', yen: '¥', cent: '¢', sect: '§',
  para: '¶', shy: '', zwj: '', zwnj: '', thinsp: ' ', ensp: ' ', emsp: ' ', larr: '←', rarr: '→', uarr: '↑',
  darr: '↓', hearts: '♥', check: '✓', minus: '−', plusmn: '±', frac12: '½', frac14: '¼', frac34: '¾',
};

/** Decodes character references (`&amp;`, `&#39;`, `&#x27;`); unknown names stay as written. */
export function decodeEntities(input: string): string {
  return input.replace(/&(#[xX][0-9a-fA-F]{1,6}|#[0-9]{1,7}|[a-zA-Z][a-zA-Z0-9]{1,31});/g, (whole, ref: string) => {
    if (ref.startsWith('#')) {
      const code = ref[1] === 'x' || ref[1] === 'X' ? parseInt(ref.slice(2), 16) : parseInt(ref.slice(1), 10);
      if (!Number.isFinite(code) || code === 0 || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return '\uFFFD';
      return String.fromCodePoint(code);
    }
    return NAMED_ENTITIES[ref] ?? NAMED_ENTITIES[ref.toLowerCase()] ?? whole;
  });
}

interface Tag {
  readonly name: string;
  readonly closing: boolean;
  readonly selfClosing: boolean;
  readonly attrs: string;
}

type Token = { readonly kind: 'text'; readonly text: string } | { readonly kind: 'tag'; readonly tag: Tag };

/**
 * Splits HTML into text and tags. Comments, doctypes and processing
 * instructions vanish; a `<` that does not start a tag is text; an unclosed
 * tag or quote at the end swallows the rest (as browsers do at end of file).
 * Raw-text elements (script, style, textarea, title) keep their content as
 * one text token up to their end tag.
 */
function* tokenize(html: string): Generator<Token> {
  let i = 0;
  const n = html.length;
  while (i < n) {
    const lt = html.indexOf('<', i);
    if (lt === -1) {
      yield { kind: 'text', text: html.slice(i) };
      return;
    }
    if (lt > i) yield { kind: 'text', text: html.slice(i, lt) };
    i = lt;
    if (html.startsWith('<!--', i)) {
      const end = html.indexOf('-->', i + 4);
      i = end === -1 ? n : end + 3;
      continue;
    }
    const next = html[i + 1] ?? '';
    if (next === '!' || next === '?') {
      const end = html.indexOf('>', i + 2);
      i = end === -1 ? n : end + 1;
      continue;
    }
    const closing = next === '/';
    const nameStart = closing ? i + 2 : i + 1;
    let j = nameStart;
    while (j < n && /[A-Za-z0-9-]/.test(html[j]!)) j += 1;
    if (j === nameStart || !/[A-Za-z]/.test(html[nameStart]!)) {
      yield { kind: 'text', text: '<' };
      i += 1;
      continue;
    }
    const name = html.slice(nameStart, j).toLowerCase();
    // Find the tag's end, skipping quoted attribute values.
    let k = j;
    let quote = '';
    while (k < n) {
      const c = html[k]!;
      if (quote !== '') {
        if (c === quote) quote = '';
      } else if (c === '"' || c === "'") {
        quote = c;
      } else if (c === '>') {
        break;
      }
      k += 1;
    }
    if (k >= n) return;
    const attrs = html.slice(j, k);
    i = k + 1;
    const tag: Tag = { name, closing, selfClosing: attrs.endsWith('/'), attrs };
    yield { kind: 'tag', tag };
    if (!closing && (name === 'script' || name === 'style' || name === 'textarea' || name === 'title')) {
      const stop = rawTextEnd(html, i, name);
      yield { kind: 'text', text: html.slice(i, stop) };
      i = stop;
    }
  }
}

/** Where the raw text of element `name` starting at `from` ends: its end tag (any case), else the end. */
function rawTextEnd(html: string, from: number, name: string): number {
  for (let pos = from; ; ) {
    const at = html.indexOf('</', pos);
    if (at === -1) return html.length;
    if (html.slice(at + 2, at + 2 + name.length).toLowerCase() === name) return at;
    pos = at + 2;
  }
}

/** The value of attribute `name` in a tag's attribute text, entity-decoded; undefined when absent. */
function attribute(attrs: string, name: string): string | undefined {
  const re = new RegExp(`(?:^|\\s)${name}\\s*=\\s*(?:"([^"]*)"|'([^']*)'|([^\\s"'>]+))`, 'i');
  const m = re.exec(attrs);
  if (m === null) return undefined;
  return decodeEntities(m[1] ?? m[2] ?? m[3] ?? '');
}

function collapseInline(text: string): string {
  return text.replace(/[ \t\r\n\f\v\u00a0]+/g, ' ');
}

/** Removes trailing spaces, caps blank lines at one, and trims. */
function tidy(markdown: string): string {
  return markdown
    .split('\n')
    .map((line) => line.replace(/[ \t]+$/, ''))
    .join('\n')
    .replace(/\n{3,}/g, '\n\n')
    .trim();
}

/** The page's title: `<title>`, else the first `<h1>`, else ''. */
function pageTitle(tokens: readonly Token[]): string {
  let inH1 = false;
  let h1 = '';
  for (let t = 0; t < tokens.length; t += 1) {
    const token = tokens[t]!;
    if (token.kind === 'tag' && token.tag.name === 'title' && !token.tag.closing) {
      const next = tokens[t + 1];
      const title = next?.kind === 'text' ? collapseInline(decodeEntities(next.text)).trim() : '';
      if (title !== '') return title;
    }
    if (token.kind === 'tag' && token.tag.name === 'h1') {
      if (!token.tag.closing && h1 === '') inH1 = true;
      else if (token.tag.closing) inH1 = false;
    } else if (inH1 && token.kind === 'text') {
      h1 += token.text;
    }
  }
  return collapseInline(decodeEntities(h1)).trim();
}

/** The tokens of the first `<main>` (else `<article>`), when the page has one with some text. */
function mainContent(tokens: readonly Token[]): readonly Token[] {
  for (const wanted of ['main', 'article']) {
    const start = tokens.findIndex((t) => t.kind === 'tag' && t.tag.name === wanted && !t.tag.closing);
    if (start === -1) continue;
    let depth = 0;
    for (let t = start; t < tokens.length; t += 1) {
      const token = tokens[t]!;
      if (token.kind !== 'tag' || token.tag.name !== wanted) continue;
      depth += token.tag.closing ? -1 : 1;
      if (depth === 0) {
        const inner = tokens.slice(start + 1, t);
        if (inner.some((x) => x.kind === 'text' && x.text.trim() !== '')) return inner;
        break;
      }
    }
  }
  return tokens;
}

/** Resolves a link against the page URL; undefined for links that are not http(s) or are unparsable. */
function absoluteLink(href: string, baseUrl: string | undefined): string | undefined {
  try {
    const url = baseUrl === undefined ? new URL(href) : new URL(href, baseUrl);
    return url.protocol === 'http:' || url.protocol === 'https:' ? url.toString() : undefined;
  } catch {
    return undefined;
  }
}

/** Converts an HTML document to its title and readable markdown. `baseUrl` makes relative links absolute. */
export function htmlToReadableText(html: string, baseUrl?: string): ReadableText {
  const all = [...tokenize(html)];
  const title = pageTitle(all);
  const tokens = mainContent(all);
  const out: string[] = [];
  let dropDepth = 0;
  let dropName = '';
  let preDepth = 0;
  const listStack: { ordered: boolean; next: number }[] = [];
  const links: { href: string | undefined; start: number }[] = [];

  const block = () => out.push('\n\n');
  for (const token of tokens) {
    if (dropDepth > 0) {
      if (token.kind === 'tag' && token.tag.name === dropName && !VOID.has(dropName)) {
        if (token.tag.closing) dropDepth -= 1;
        else if (!token.tag.selfClosing) dropDepth += 1;
      }
      continue;
    }
    if (token.kind === 'text') {
      const decoded = decodeEntities(token.text);
      out.push(preDepth > 0 ? decoded : collapseInline(decoded));
      continue;
    }
    const { name, closing, selfClosing } = token.tag;
    if (name === 'title') continue;
    if (DROPPED.has(name)) {
      if (!closing && !selfClosing && !VOID.has(name)) {
        dropDepth = 1;
        dropName = name;
      }
      continue;
    }
    if (/^h[1-6]$/.test(name)) {
      block();
      if (!closing) out.push(`${'#'.repeat(Number(name[1]))} `);
      continue;
    }
    switch (name) {
      case 'br':
        out.push('\n');
        break;
      case 'hr':
        out.push('\n\n---\n\n');
        break;
      case 'pre':
        if (closing) {
          preDepth = Math.max(0, preDepth - 1);
          out.push('\n```\n\n');
        } else {
          preDepth += 1;
          out.push('\n\n```\n');
        }
        break;
      case 'code':
        if (preDepth === 0) out.push('`');
        break;
      case 'strong':
      case 'b':
        out.push('**');
        break;
      case 'em':
      case 'i':
        out.push('_');
        break;
      case 'ul':
      case 'ol':
        if (closing) listStack.pop();
        else listStack.push({ ordered: name === 'ol', next: 1 });
        block();
        break;
      case 'li': {
        if (closing) break;
        const list = listStack[listStack.length - 1];
        const indent = '  '.repeat(Math.max(0, listStack.length - 1));
        out.push(`\n${indent}${list?.ordered === true ? `${list.next++}.` : '-'} `);
        break;
      }
      case 'td':
      case 'th':
        if (!closing) out.push(' | ');
        break;
      case 'a':
        if (!closing) {
          const href = attribute(token.tag.attrs, 'href');
          links.push({ href: href === undefined ? undefined : absoluteLink(href, baseUrl), start: out.length });
        } else {
          const link = links.pop();
          if (link?.href !== undefined) {
            const label = out.splice(link.start).join('').trim();
            out.push(label === '' ? '' : `[${label}](${link.href})`);
          }
        }
        break;
      default:
        if (BLOCK.has(name)) block();
    }
  }
  return { title, markdown: tidy(out.join('')) };
}
