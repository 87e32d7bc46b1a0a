/** write_file: create or replace a whole file in the task environment. */
import type { ToolArgs, ToolContext, ToolRegistration } from '../../tool-types.js';
import { ToolInputError, guarded, nonEmptyStringArg, stringArg, TOOLSET, type JsonObject } from './common.js';

export function writeFileRegistration(): ToolRegistration {
  return {
    name: 'write_file',
    toolset: TOOLSET,
    emoji: '✍️',
    schema: {
      name: 'write_file',
      description:
        'Create a file or replace its entire content, creating missing parent directories. ' +
        'To change part of an existing file use patch instead.',
      parameters: {
        type: 'object',
        properties: {
          path: {
            type: 'string',
            description: 'File to write: absolute, relative to the current working directory, or starting with ~.',
          },
          content: {
            type: 'string',
            description: 'The complete new content of the file (UTF-8 text). Replaces whatever was there.',
          },
        },
        required: ['path', 'content'],
      },
    },
    handler: guarded(writeFileTool),
  };
}

async function writeFileTool(args: ToolArgs, context: ToolContext): Promise<JsonObject> {
  const path = nonEmptyStringArg(args, 'path');
  const content = stringArg(args, 'content', true);
  const stat = await context.task.stat(path);
  if (stat.isDirectory) throw new ToolInputError(`${path} is a directory; give a file path to write.`);
  const written = await context.task.writeFile(path, content);
  return { path: written.absPath, bytes_written: written.bytesWritten, dirs_created: written.dirsCreated };
}

