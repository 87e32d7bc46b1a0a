/** Cleanup of snapshot images a test made on the docker backend. */
import type Dockerode from 'dockerode';
import { LABEL } from '../../services/executor/backends/docker/container-spec.js';
import { SNAPSHOT_LABEL } from '../../services/executor/backends/docker/docker-snapshots.js';

/**
 * Removes the snapshot images (finished or half-made) that executors with
 * these state roots made: they carry the executor's `berth.state_root`.
 * Children first, so parents come free.
 */
export async function removeSnapshotImages(docker: Dockerode, stateRoots: readonly string[]): Promise<number> {
  let removed = 0;
  for (let pass = 0; pass < 5; pass++) {
    const images = await docker.listImages({ all: true, filters: { label: [SNAPSHOT_LABEL.part] } });
    const ours = images.filter((i) => stateRoots.includes(i.Labels?.[LABEL.stateRoot] ?? ''));
    if (ours.length === 0) break;
    for (const image of ours) {
      await docker
        .getImage(image.Id)
        .remove({ force: true })
        .then(() => (removed += 1))
        .catch(() => undefined);
    }
  }
  return removed;
}
