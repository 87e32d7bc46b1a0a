/**
 * nice-grpc's status codes, ClientError and Metadata from nice-grpc-common,
 * by require(): the same classes nice-grpc re-exports (instanceof holds
 * across both), without loading nice-grpc and @grpc/grpc-js. What the client
 * library's errors and the CLI's failure paths use, so a command that does
 * not speak through grpc-js never loads it.
 */
import { createRequire } from 'node:module';
import type * as NiceGrpcCommon from 'nice-grpc-common';

const niceGrpcCommon = createRequire(import.meta.url)('nice-grpc-common') as typeof NiceGrpcCommon;

export const { ClientError, Metadata, Status } = niceGrpcCommon;
export type ClientError = NiceGrpcCommon.ClientError;
export type Metadata = NiceGrpcCommon.Metadata;
export type Status = NiceGrpcCommon.Status;
