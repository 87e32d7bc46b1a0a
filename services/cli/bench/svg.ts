/** A minimal SVG writer: elements as strings, attributes and text escaped. */

export type Attrs = Readonly<Record<string, string | number | undefined>>;

export function escapeXml(text: string): string {
  return text.replace(/[&<>"']/g, (ch) => `&#${ch.charCodeAt(0)};`);
}

function formatNumber(n: number): string {
  // Two decimals are plenty for pixels and keep the file small and diffable.
  return Number.isInteger(n) ? String(n) : n.toFixed(2).replace(/\.?0+$/, '');
}

function attrs(a: Attrs): string {
  return Object.entries(a)
    .filter((e): e is [string, string | number] => e[1] !== undefined)
    .map(([k, v]) => ` ${k}="${typeof v === 'number' ? formatNumber(v) : escapeXml(v)}"`)
    .join('');
}

/** An element; `children` are already-rendered elements or escaped text from {@link text}. */
export function el(tag: string, a: Attrs = {}, children: readonly string[] = []): string {
  if (children.length === 0) return `<${tag}${attrs(a)}/>`;
  return `<${tag}${attrs(a)}>${children.join('')}</${tag}>`;
}

/** A text element with its content escaped. */
export function text(x: number, y: number, content: string, a: Attrs = {}): string {
  return `<text${attrs({ x, y, ...a })}>${escapeXml(content)}</text>`;
}

export function svgDocument(width: number, height: number, children: readonly string[]): string {
  return (
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" ` +
    `viewBox="0 0 ${width} ${height}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="11">\n` +
    `${children.join('\n')}\n</svg>\n`
  );
}
