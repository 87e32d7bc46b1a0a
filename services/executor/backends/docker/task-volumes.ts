/** A task's persistent volumes (terminal.container_persistent) on the engine: their labels, and removing them. */
import type Dockerode from 'dockerode';
import { dockerError, isNotFound } from './docker-errors.js';

/** A volume's labels, or undefined when it does not exist. */
export async function volumeLabels(docker: Dockerode, daemon: string, name: string): Promise<Record<string, string> | undefined> {
  try {
    return (await docker.getVolume(name).inspect()).Labels ?? {};
  } catch (err) {
    if (isNotFound(err)) return undefined;
    throw dockerError(err, `inspecting volume ${name}`, daemon);
  }
}

/** Removes `names`; missing ones are fine. */
export async function removeVolumes(docker: Dockerode, daemon: string, names: readonly string[]): Promise<void> {
  for (const name of names) {
    try {
      await docker.getVolume(name).remove();
    } catch (err) {
      if (!isNotFound(err)) throw dockerError(err, `removing volume ${name}`, daemon);
    }
  }
}
