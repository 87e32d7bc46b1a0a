/**
 * Progress on stderr. On a terminal: one bar redrawn in place, with notes
 * and finished cases printed above it. Otherwise (CI logs, pipes): plain
 * lines only, at case start, every quarter, and at case end.
 */

export interface ProgressStream {
  write(text: string): unknown;
  readonly isTTY?: boolean;
  readonly columns?: number;
}

const REDRAW_EVERY_MS = 80;
const BAR_WIDTH = 24;

export class Progress {
  readonly #out: ProgressStream;
  readonly #tty: boolean;
  readonly #totalCases: number;
  #index = 0;
  #name = '';
  #fraction = 0;
  #phase = '';
  #lastDrawMs = 0;
  #lastQuarter = 0;
  #barShown = false;

  constructor(out: ProgressStream, totalCases: number, tty = out.isTTY === true) {
    this.#out = out;
    this.#tty = tty;
    this.#totalCases = totalCases;
  }

  startCase(name: string): void {
    this.#index += 1;
    this.#name = name;
    this.#fraction = 0;
    this.#phase = 'setup';
    this.#lastQuarter = 0;
    if (this.#tty) this.#draw(true);
    else this.#out.write(`${this.#prefix()} ${name} ...\n`);
  }

  /** `fraction` of the current case done (0..1), and what it is doing now. */
  update(fraction: number, phase: string): void {
    this.#fraction = Math.max(0, Math.min(1, fraction));
    this.#phase = phase;
    if (this.#tty) {
      this.#draw(false);
      return;
    }
    const quarter = Math.floor(this.#fraction * 4);
    if (quarter > this.#lastQuarter && quarter < 4) {
      this.#lastQuarter = quarter;
      this.#out.write(`${this.#prefix()}   ${quarter * 25}% (${phase})\n`);
    }
  }

  /** A line that stays (setup notes, skips). */
  note(message: string): void {
    this.#above(`  ${message}`);
  }

  /** Ends the current case with its one-line summary. */
  endCase(summary: string): void {
    this.#above(`${this.#prefix()} ${this.#name}: ${summary}`, false);
  }

  finish(): void {
    if (this.#tty) this.#clear();
  }

  #prefix(): string {
    const width = String(this.#totalCases).length;
    return `bench [${String(this.#index).padStart(width)}/${this.#totalCases}]`;
  }

  #above(line: string, redraw = true): void {
    if (this.#tty) {
      this.#clear();
      this.#out.write(`${line}\n`);
      if (redraw) this.#draw(true);
    } else {
      this.#out.write(`${line}\n`);
    }
  }

  #clear(): void {
    if (this.#barShown) this.#out.write('\r\x1b[2K');
    this.#barShown = false;
  }

  #draw(force: boolean): void {
    const now = Date.now();
    if (!force && now - this.#lastDrawMs < REDRAW_EVERY_MS) return;
    this.#lastDrawMs = now;
    const filled = Math.round(this.#fraction * BAR_WIDTH);
    const bar = `${'█'.repeat(filled)}${'░'.repeat(BAR_WIDTH - filled)}`;
    const pct = `${Math.floor(this.#fraction * 100)}`.padStart(3);
    let line = `${this.#prefix()} ${bar} ${pct}%  ${this.#name} — ${this.#phase}`;
    const columns = this.#out.columns ?? 100;
    if (line.length > columns - 1) line = `${line.slice(0, columns - 2)}…`;
    this.#out.write(`\r\x1b[2K${line}`);
    this.#barShown = true;
  }
}
