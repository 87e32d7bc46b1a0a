/**
 * Modal's gRPC service definitions, taken from the installed `modal` SDK's
 * own bundle, for the Modal stand-in (a test double). The SDK does not
 * export its generated ts-proto messages, so this compiles its CommonJS
 * bundle once more with one line appended that hands out the two service
 * definitions it already holds: the stand-in then encodes and decodes with
 * exactly the codecs the SDK uses and cannot drift from it. Nothing in
 * node_modules is written.
 */
import { readFileSync } from 'node:fs';
import Module, { createRequire } from 'node:module';
import path from 'node:path';

/** One method of a ts-proto / nice-grpc service definition. */
export interface MethodDefinition {
  readonly name: string;
  readonly requestStream: boolean;
  readonly responseStream: boolean;
  readonly requestType: MessageCodec;
  readonly responseType: MessageCodec;
}

export interface MessageCodec {
  fromPartial(value: unknown): unknown;
}

export interface ServiceDefinition {
  readonly name: string;
  readonly fullName: string;
  readonly methods: Readonly<Record<string, MethodDefinition>>;
}

export interface ModalDefinitions {
  /** `modal.client.ModalClient`: the control plane. */
  readonly controlPlane: ServiceDefinition;
  /** `modal.task_command_router.TaskCommandRouter`: exec and snapshots of one task. */
  readonly commandRouter: ServiceDefinition;
  /** The SDK's version, from its package.json. */
  readonly sdkVersion: string;
}

const EXPORT_KEY = '__berthStandinDefinitions';

let cached: ModalDefinitions | undefined;

interface InternalModule {
  filename: string;
  paths: string[];
  exports: Record<string, unknown>;
  _compile(source: string, filename: string): void;
}
interface InternalModuleClass {
  new (id: string): InternalModule;
  _nodeModulePaths(dir: string): string[];
}

/** Loads (once) the service definitions bundled in the installed `modal` package. */
export function modalDefinitions(): ModalDefinitions {
  if (cached) return cached;
  const require = createRequire(import.meta.url);
  const entry = require.resolve('modal');
  if (!entry.endsWith('.cjs')) throw new Error(`expected the modal SDK's CommonJS bundle, resolved ${entry}`);
  const pkg = JSON.parse(readFileSync(path.join(path.dirname(entry), '..', 'package.json'), 'utf8')) as { version: string };
  const source = readFileSync(entry, 'utf8');
  const ModuleClass = Module as unknown as InternalModuleClass;
  const mod = new ModuleClass(entry);
  mod.filename = entry;
  mod.paths = ModuleClass._nodeModulePaths(path.dirname(entry));
  mod._compile(
    `${source}\n;module.exports.${EXPORT_KEY} = { controlPlane: ModalClientDefinition, commandRouter: TaskCommandRouterDefinition };\n`,
    entry,
  );
  const defs = mod.exports[EXPORT_KEY] as { controlPlane: ServiceDefinition; commandRouter: ServiceDefinition } | undefined;
  if (!defs?.controlPlane?.methods || !defs.commandRouter?.methods) {
    throw new Error(`the modal SDK ${pkg.version} no longer bundles ModalClientDefinition / TaskCommandRouterDefinition`);
  }
  cached = { ...defs, sdkVersion: pkg.version };
  return cached;
}
