import { pino, type DestinationStream, type Logger as PinoLogger, type LevelWithSilent } from 'pino';

/** JSON-lines logger. Every service gets one from its main and passes it down. */
export type Logger = PinoLogger;

/**
 * `destination` defaults to stderr. Both stderr and {@link logFileDestination}
 * are written synchronously, as Node writes `process.stderr` to files and
 * pipes: pino's default (an asynchronous write through the thread pool, and
 * a wake-up of the event loop when it is done) cost about 130 µs of CPU per
 * line when lines come one per call, against about 35 µs (docs/performance.md,
 * "Where a warm call's time goes"). A reader of stderr that stops reading
 * holds the server up once the pipe is full, as it would hold console.error.
 */
export function createLogger(level: LevelWithSilent = 'info', destination?: NodeJS.WritableStream | DestinationStream): Logger {
  return pino(
    { level, base: { service: 'berth' }, timestamp: pino.stdTimeFunctions.isoTime },
    destination ?? pino.destination({ dest: 2, sync: true }),
  );
}

/** A file the log is appended to, written as stderr is (see {@link createLogger}). */
export function logFileDestination(path: string): DestinationStream {
  return pino.destination({ dest: path, append: true, sync: true });
}

/** A logger that drops everything; for unit tests. */
export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}
