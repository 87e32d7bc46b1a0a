/**
 * Starts the Daytona stand-in (a test double, see server.ts) for
 * `npm run standin -- daytona --port N`. The accepted API key is
 * DAYTONA_STANDIN_API_KEY, or `standin-key` when unset;
 * DAYTONA_STANDIN_MAX_CPU sets an organization CPU limit (none when unset).
 */
import { DaytonaStandIn } from './server.js';

export { STANDIN_LABEL } from './server.js';

export const DEFAULT_STANDIN_API_KEY = 'standin-key';

export async function startDaytonaStandIn(port: number): Promise<DaytonaStandIn> {
  const maxCpu = Number(process.env.DAYTONA_STANDIN_MAX_CPU);
  const standIn = new DaytonaStandIn({
    apiKey: process.env.DAYTONA_STANDIN_API_KEY || DEFAULT_STANDIN_API_KEY,
    port,
    ...(maxCpu > 0 ? { maxTotalCpu: maxCpu } : {}),
  });
  await standIn.listen();
  return standIn;
}
