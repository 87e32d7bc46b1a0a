/**
 * gRPC server reflection (what `grpcurl` and similar tools ask a server),
 * registered at start but loaded at its first request. The implementation
 * (nice-grpc-server-reflection) parses our descriptor set into
 * google-protobuf objects and needs google-protobuf's generated descriptor
 * classes: 3–4 MiB of every server's resident memory (docs/performance.md),
 * kept for the life of the process, for a service that a deployment rarely
 * or never calls. Here the service's definition is written out (its one method's
 * path and streaming flags), with serializers that load the real ones, and
 * the implementation is made at the first call.
 */
import { createRequire } from 'node:module';
import type * as Reflection from 'nice-grpc-server-reflection';

type ReflectionModule = typeof Reflection;
type ReflectionMethod = ReflectionModule['ServerReflectionService']['serverReflectionInfo'];
type ReflectionImpl = ReturnType<ReflectionModule['ServerReflection']>;

let reflectionModule: ReflectionModule | undefined;
/** nice-grpc-server-reflection, loaded once; a failure to load surfaces as the call's error. */
function reflection(): ReflectionModule {
  reflectionModule ??= createRequire(import.meta.url)('nice-grpc-server-reflection') as ReflectionModule;
  return reflectionModule;
}

const method = (): ReflectionMethod => reflection().ServerReflectionService.serverReflectionInfo;

/**
 * The same service as nice-grpc-server-reflection's `ServerReflectionService`
 * (grpc-js form: nice-grpc takes the path, the streaming flags and the four
 * serializers from it), loading nothing until a message is read or written.
 */
export const LazyServerReflectionService = {
  serverReflectionInfo: {
    path: '/grpc.reflection.v1.ServerReflection/ServerReflectionInfo',
    requestStream: true,
    responseStream: true,
    requestSerialize: (value: Parameters<ReflectionMethod['requestSerialize']>[0]) => method().requestSerialize(value),
    requestDeserialize: (bytes: Buffer) => method().requestDeserialize(bytes),
    responseSerialize: (value: Parameters<ReflectionMethod['responseSerialize']>[0]) => method().responseSerialize(value),
    responseDeserialize: (bytes: Buffer) => method().responseDeserialize(bytes),
  },
} as unknown as ReflectionModule['ServerReflectionService'];

/**
 * `ServerReflection(descriptorSet, serviceNames)`, made at the first call
 * (the descriptor set is parsed then) and kept for the next ones.
 */
export function lazyServerReflection(descriptorSet: Uint8Array, serviceNames: string[]): ReflectionImpl {
  let impl: ReflectionImpl | undefined;
  return {
    serverReflectionInfo(requests, context) {
      impl ??= reflection().ServerReflection(descriptorSet, serviceNames);
      return impl.serverReflectionInfo(requests, context);
    },
  };
}
