/** A configuration that cannot be used; kept apart from config.ts so that throwing or catching it loads no schema. */
export class ConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ConfigError';
  }
}
