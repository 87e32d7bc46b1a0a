import { pino, type Logger as PinoLogger, type LevelWithSilent } from 'pino';

/** JSON-lines logger. Every service gets one from its main and passes it down. */
export type Logger = PinoLogger;

export function createLogger(level: LevelWithSilent = 'info', destination?: NodeJS.WritableStream): Logger {
  return pino(
    { level, base: { service: 'berth' }, timestamp: pino.stdTimeFunctions.isoTime },
    destination ?? pino.destination(2),
  );
}

/** A logger that drops everything; for unit tests. */
export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}
