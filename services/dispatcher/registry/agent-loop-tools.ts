/**
 * The agent-loop tools (`todo_list`, `memory`, `session_search`,
 * `delegate_task`): listed with their schemas so the model can call them,
 * answered by the caller's agent loop, never by Berth.
 */
import type { JsonSchema, ToolRegistration, ToolSchema } from './tool-types.js';
import { errorResult } from './tool-results.js';

/**
 * Tools whose state lives in the agent loop (its todo list, memory, session
 * store, sub-agents). Their schemas are listed so the model can call them, but
 * the caller must intercept the calls; reaching dispatch is a caller bug.
 */
export const AGENT_LOOP_TOOLS: ReadonlySet<string> = new Set(['todo_list', 'memory', 'session_search', 'delegate_task']);

const TODO_PARAMETERS: JsonSchema = {
  type: 'object',
  properties: {
    todos: {
      type: 'array',
      description:
        'The task list to write. Omit to read the current list. Each item has an id, the task text and its status.',
      items: {
        type: 'object',
        properties: {
          id: { type: 'string', description: 'Stable identifier of the item, used to update it later.' },
          content: { type: 'string', description: 'What needs to be done.' },
          status: {
            type: 'string',
            enum: ['pending', 'in_progress', 'completed', 'cancelled'],
            description: 'Where the item stands.',
          },
        },
        required: ['id', 'content', 'status'],
      },
    },
    merge: {
      type: 'boolean',
      default: false,
      description:
        'true: update items with matching ids and append new ones. false: replace the whole list with todos.',
    },
  },
  required: [],
};

const MEMORY_PARAMETERS: JsonSchema = {
  type: 'object',
  properties: {
    action: {
      type: 'string',
      enum: ['add', 'replace', 'remove'],
      description: 'add a new entry, replace the entry containing old_text, or remove it.',
    },
    target: {
      type: 'string',
      enum: ['memory', 'user'],
      description: 'memory: your own notes about the environment and work. user: what you learned about the user.',
    },
    content: { type: 'string', description: 'The entry text (for add and replace).' },
    old_text: {
      type: 'string',
      description: 'A short unique piece of the existing entry to replace or remove.',
    },
  },
  required: ['action', 'target'],
};

const SESSION_SEARCH_PARAMETERS: JsonSchema = {
  type: 'object',
  properties: {
    query: {
      type: 'string',
      description: 'Words to search for in earlier sessions. Omit to list the most recent sessions.',
    },
    limit: {
      type: 'integer',
      minimum: 1,
      maximum: 10,
      default: 3,
      description: 'How many sessions to summarise.',
    },
  },
  required: [],
};

const DELEGATE_TASK_PARAMETERS: JsonSchema = {
  type: 'object',
  properties: {
    goal: { type: 'string', description: 'What the sub-agent must achieve, stated so it can work without this conversation.' },
    context: {
      type: 'string',
      description: 'Facts the sub-agent needs: file paths, constraints, what has been tried.',
    },
    toolsets: {
      type: 'array',
      items: { type: 'string' },
      description: 'Toolsets the sub-agent may use (for example terminal, file, web). Defaults to yours.',
    },
    tasks: {
      type: 'array',
      description: 'Several independent tasks to run in parallel, each with its own goal; use instead of goal.',
      items: {
        type: 'object',
        properties: {
          goal: { type: 'string' },
          context: { type: 'string' },
          toolsets: { type: 'array', items: { type: 'string' } },
        },
        required: ['goal'],
      },
    },
  },
  required: [],
};

const AGENT_LOOP_STUBS: readonly { toolset: string; schema: ToolSchema }[] = [
  {
    toolset: 'todo',
    schema: {
      name: 'todo_list',
      description:
        'Read or write your task list for this session. Use it for work with three or more steps: write the plan, ' +
        'mark one item in_progress at a time and completed when done.',
      parameters: TODO_PARAMETERS,
    },
  },
  {
    toolset: 'memory',
    schema: {
      name: 'memory',
      description:
        'Keep durable notes that persist across sessions: facts about the environment, conventions, and the ' +
        "user's preferences. Save what will matter later, not task progress.",
      parameters: MEMORY_PARAMETERS,
    },
  },
  {
    toolset: 'session_search',
    schema: {
      name: 'session_search',
      description:
        'Search earlier conversations with this user and get summaries of the matching sessions. Use it when the ' +
        'user refers to something from a past session.',
      parameters: SESSION_SEARCH_PARAMETERS,
    },
  },
  {
    toolset: 'delegation',
    schema: {
      name: 'delegate_task',
      description:
        'Hand a self-contained task to a sub-agent with a fresh context and get its final summary back. The ' +
        'sub-agent sees only goal and context, not this conversation.',
      parameters: DELEGATE_TASK_PARAMETERS,
    },
  },
];

/**
 * Registers the schemas of the agent-loop tools (`todo_list`, `memory`,
 * `session_search`, `delegate_task`) so listings include them. Their handlers
 * only return the agent-loop error; dispatch answers before reaching them.
 */
export function registerAgentLoopToolStubs(registry: { register(registration: ToolRegistration): void }): void {
  for (const { toolset, schema } of AGENT_LOOP_STUBS) {
    registry.register({
      name: schema.name,
      toolset,
      schema,
      handler: () => errorResult(`${schema.name} must be handled by the agent loop`),
    });
  }
}
