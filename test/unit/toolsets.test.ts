import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { silentLogger } from '../../services/common/logging.js';
import { InvalidArgumentError } from '../../services/common/errors.js';
import { ToolRegistry } from '../../services/dispatcher/registry/registry.js';
import type { ToolRegistration, ToolSchema } from '../../services/dispatcher/registry/tool-types.js';
import {
  BROWSER_WEB_HINT,
  CORE_TOOLS,
  PLATFORM_TOOLSETS,
  SANDBOX_TOOLS,
  getToolDefinitions,
  listToolsets,
  registerToolset,
  resolveToolset,
  selectToolNames,
  unregisterToolset,
  validateToolsetName,
} from '../../services/dispatcher/registry/toolsets.js';

/** Registers plugin toolsets for one test and always removes them (the table is process-wide). */
function withToolsets(defs: Record<string, Parameters<typeof registerToolset>[1]>, body: () => void | Promise<void>) {
  return async () => {
    try {
      for (const [name, def] of Object.entries(defs)) registerToolset(name, def);
      await body();
    } finally {
      for (const name of Object.keys(defs)) unregisterToolset(name);
    }
  };
}

const EVERY_BUILTIN_TOOL = [
  'browser_back',
  'browser_click',
  'browser_close',
  'browser_get_images',
  'browser_navigate',
  'browser_press',
  'browser_scroll',
  'browser_snapshot',
  'browser_type',
  'browser_vision',
  'clarify',
  'cronjob_manage',
  'delegate_task',
  'execute_code',
  'image_generate',
  'memory',
  'patch',
  'process_manage',
  'read_file',
  'search_files',
  'session_search',
  'skill_manage',
  'skill_view',
  'skills_list',
  'terminal',
  'text_to_speech',
  'todo_list',
  'vision_analyze',
  'web_extract',
  'web_search',
  'write_file',
];

void describe('resolveToolset', () => {
  void it('resolves the leaf toolsets of the contract', () => {
    assert.deepEqual(resolveToolset('terminal'), ['process_manage', 'terminal']);
    assert.deepEqual(resolveToolset('file'), ['patch', 'read_file', 'search_files', 'write_file']);
    assert.deepEqual(resolveToolset('code_execution'), ['execute_code']);
    assert.deepEqual(resolveToolset('web'), ['web_extract', 'web_search']);
    assert.deepEqual(resolveToolset('todo'), ['todo_list']);
    assert.deepEqual(resolveToolset('memory'), ['memory']);
    assert.deepEqual(resolveToolset('session_search'), ['session_search']);
    assert.deepEqual(resolveToolset('delegation'), ['delegate_task']);
    assert.deepEqual(resolveToolset('clarify'), ['clarify']);
  });

  void it('resolves the other leaf toolsets', () => {
    assert.deepEqual(resolveToolset('browser'), EVERY_BUILTIN_TOOL.filter((t) => t.startsWith('browser_')));
    assert.deepEqual(resolveToolset('vision'), ['vision_analyze']);
    assert.deepEqual(resolveToolset('image_gen'), ['image_generate']);
    assert.deepEqual(resolveToolset('skills'), ['skill_manage', 'skill_view', 'skills_list']);
    assert.deepEqual(resolveToolset('cronjob'), ['cronjob_manage']);
    assert.deepEqual(resolveToolset('tts'), ['text_to_speech']);
  });

  void it('expands the debugging composite through its includes', () => {
    assert.deepEqual(resolveToolset('debugging'), [
      'patch',
      'process_manage',
      'read_file',
      'search_files',
      'terminal',
      'web_extract',
      'web_search',
      'write_file',
    ]);
  });

  void it('resolves every platform preset to the core tool list', () => {
    assert.deepEqual([...CORE_TOOLS], EVERY_BUILTIN_TOOL);
    assert.deepEqual(
      [...PLATFORM_TOOLSETS],
      [
        'hermes-cli',
        'hermes-api-server',
        'hermes-telegram',
        'hermes-discord',
        'hermes-slack',
        'hermes-whatsapp',
        'hermes-signal',
        'hermes-email',
      ],
    );
    for (const preset of PLATFORM_TOOLSETS) assert.deepEqual(resolveToolset(preset), EVERY_BUILTIN_TOOL);
  });

  void it('maps legacy names to tool lists without listing them as toolsets', () => {
    assert.deepEqual(resolveToolset('file_tools'), ['patch', 'read_file', 'search_files', 'write_file']);
    assert.deepEqual(resolveToolset('web_tools'), ['web_extract', 'web_search']);
    assert.deepEqual(resolveToolset('terminal_tools'), ['process_manage', 'terminal']);
    assert.deepEqual(resolveToolset('browser_tools'), resolveToolset('browser'));
    assert.deepEqual(resolveToolset('vision_tools'), ['vision_analyze']);
    assert.deepEqual(resolveToolset('image_tools'), ['image_generate']);
    assert.deepEqual(resolveToolset('skills_tools'), ['skill_manage', 'skill_view', 'skills_list']);
    assert.deepEqual(resolveToolset('cronjob_tools'), ['cronjob_manage']);
    assert.deepEqual(resolveToolset('tts_tools'), ['text_to_speech']);
    assert.equal(listToolsets().some((t) => t.name.endsWith('_tools')), false);
  });

  void it('treats all and * as every toolset', () => {
    assert.deepEqual(resolveToolset('all'), EVERY_BUILTIN_TOOL);
    assert.deepEqual(resolveToolset('*'), EVERY_BUILTIN_TOOL);
  });

  void it(
    'includes registered toolsets in all',
    withToolsets({ 'plugin-extra': { description: 'extra', tools: ['extra_tool'] } }, () => {
      assert.equal(resolveToolset('all').includes('extra_tool'), true);
    }),
  );

  void it('resolves an unknown name to nothing', () => {
    assert.deepEqual(resolveToolset('no-such-toolset'), []);
  });

  void it(
    'survives include cycles',
    withToolsets(
      {
        'cycle-a': { description: 'a', tools: ['tool_a'], includes: ['cycle-b'] },
        'cycle-b': { description: 'b', tools: ['tool_b'], includes: ['cycle-a'] },
      },
      () => {
        assert.deepEqual(resolveToolset('cycle-a'), ['tool_a', 'tool_b']);
        assert.deepEqual(resolveToolset('cycle-b'), ['tool_a', 'tool_b']);
      },
    ),
  );

  void it(
    'expands a diamond once',
    withToolsets(
      {
        'dia-base': { description: 'base', tools: ['base_tool'] },
        'dia-left': { description: 'left', tools: ['left_tool'], includes: ['dia-base'] },
        'dia-right': { description: 'right', tools: ['right_tool'], includes: ['dia-base'] },
        'dia-top': { description: 'top', tools: [], includes: ['dia-left', 'dia-right', 'web_tools'] },
      },
      () => {
        assert.deepEqual(resolveToolset('dia-top'), ['base_tool', 'left_tool', 'right_tool', 'web_extract', 'web_search']);
      },
    ),
  );
});

void describe('toolset registration and validation', () => {
  void it('validates toolset names, aliases, legacy names and all/*', () => {
    for (const name of ['web', 'debugging', 'hermes-cli', 'file_tools', 'all', '*']) {
      assert.equal(validateToolsetName(name), true, name);
    }
    assert.equal(validateToolsetName('nope'), false);
    assert.equal(validateToolsetName(''), false);
  });

  void it(
    'gives an mcp-<server> toolset the server name as alias',
    withToolsets({ 'mcp-github': { description: 'GitHub MCP server', tools: ['create_issue', 'list_prs'] } }, () => {
      assert.equal(validateToolsetName('github'), true);
      assert.deepEqual(resolveToolset('github'), ['create_issue', 'list_prs']);
      const info = listToolsets().find((t) => t.name === 'mcp-github');
      assert.deepEqual(info, {
        name: 'mcp-github',
        description: 'GitHub MCP server',
        tools: ['create_issue', 'list_prs'],
        includes: [],
        aliases: ['github'],
        builtin: false,
      });
    }),
  );

  void it(
    'takes old tool names in a toolset as the current ones: a list naming process grants process_manage',
    withToolsets({ 'plugin-ops': { description: 'ops', tools: ['process', 'todo', 'cronjob', 'process_manage', 'deploy'] } }, () => {
      assert.deepEqual(resolveToolset('plugin-ops'), ['cronjob_manage', 'deploy', 'process_manage', 'todo_list']);
      assert.deepEqual(selectToolNames({ enabled: ['plugin-ops'], disabled: ['terminal'] }).names, [
        'cronjob_manage',
        'deploy',
        'todo_list',
      ]);
    }),
  );

  void it('removes the alias when the toolset is unregistered', () => {
    registerToolset('mcp-jira', { description: 'jira', tools: ['jira_search'] });
    assert.equal(unregisterToolset('mcp-jira'), true);
    assert.equal(validateToolsetName('jira'), false);
    assert.deepEqual(resolveToolset('jira'), []);
  });

  void it(
    'does not let an alias shadow a built-in toolset',
    withToolsets({ 'mcp-web': { description: 'web MCP', tools: ['fetch_page'] } }, () => {
      assert.deepEqual(resolveToolset('web'), ['web_extract', 'web_search']);
      assert.deepEqual(resolveToolset('mcp-web'), ['fetch_page']);
    }),
  );

  void it('refuses to redefine built-in or legacy toolsets and malformed names', () => {
    assert.throws(() => registerToolset('terminal', { description: 'x', tools: [] }), InvalidArgumentError);
    assert.throws(() => registerToolset('web_tools', { description: 'x', tools: [] }), InvalidArgumentError);
    assert.throws(() => registerToolset('all', { description: 'x', tools: [] }), InvalidArgumentError);
    assert.throws(() => registerToolset('has space', { description: 'x', tools: [] }), InvalidArgumentError);
    assert.equal(unregisterToolset('terminal'), false);
    assert.deepEqual(resolveToolset('terminal'), ['process_manage', 'terminal']);
  });

  void it('lists built-in toolsets sorted with their resolved tools', () => {
    const listed = listToolsets();
    const names = listed.map((t) => t.name);
    assert.deepEqual(names, [...names].sort());
    assert.deepEqual(listed.find((t) => t.name === 'debugging')?.includes, ['web', 'file']);
    assert.equal(listed.find((t) => t.name === 'terminal')?.builtin, true);
  });
});

void describe('selectToolNames', () => {
  void it('includes only the enabled toolsets and reports unknown names', () => {
    assert.deepEqual(selectToolNames({ enabled: ['web', 'nope', 'clarify'] }), {
      names: ['clarify', 'web_extract', 'web_search'],
      unknown: ['nope'],
    });
  });

  void it('includes every toolset when none are enabled', () => {
    assert.deepEqual(selectToolNames({}).names, EVERY_BUILTIN_TOOL);
    assert.deepEqual(selectToolNames({ enabled: [] }).names, EVERY_BUILTIN_TOOL);
  });

  void it('subtracts disabled toolsets last', () => {
    assert.deepEqual(selectToolNames({ enabled: ['debugging', 'web'], disabled: ['web'] }).names, [
      'patch',
      'process_manage',
      'read_file',
      'search_files',
      'terminal',
      'write_file',
    ]);
  });

  void it('reports unknown disabled names without failing', () => {
    assert.deepEqual(selectToolNames({ enabled: ['web'], disabled: ['ghost'] }), {
      names: ['web_extract', 'web_search'],
      unknown: ['ghost'],
    });
  });

  void it('keeps core tools when a built-in platform bundle is disabled', () => {
    assert.deepEqual(selectToolNames({ disabled: ['hermes-cli'] }).names, EVERY_BUILTIN_TOOL);
  });

  void it(
    'removes only the non-core tools of a disabled platform bundle',
    withToolsets(
      { 'hermes-testbed': { description: 'testbed platform', tools: ['testbed_send'], includes: ['hermes-cli'] } },
      () => {
        assert.equal(selectToolNames({}).names.includes('testbed_send'), true);
        assert.deepEqual(selectToolNames({ disabled: ['hermes-testbed'] }).names, EVERY_BUILTIN_TOOL);
      },
    ),
  );
});

void describe('getToolDefinitions', () => {
  const NAVIGATE_DESCRIPTION = `Open a URL in the browser.${BROWSER_WEB_HINT} Returns a page snapshot.`;

  function reg(name: string, toolset: string, extra: Partial<ToolRegistration> = {}): ToolRegistration {
    return {
      name,
      toolset,
      schema: { name, description: `${name} tool`, parameters: { type: 'object', properties: {} } },
      handler: () => '{}',
      ...extra,
    };
  }

  function registry(options: { webSearchUp?: boolean } = {}): ToolRegistry {
    const r = new ToolRegistry({ logger: silentLogger() });
    r.register(reg('execute_code', 'code_execution'));
    r.register(reg('terminal', 'terminal'));
    r.register(reg('read_file', 'file'));
    r.register(reg('write_file', 'file'));
    r.register(reg('web_search', 'web', { checkFn: () => options.webSearchUp ?? true }));
    r.register(reg('web_extract', 'web', { checkFn: () => false }));
    r.register(reg('browser_navigate', 'browser', { description: NAVIGATE_DESCRIPTION }));
    return r;
  }

  function buildExecuteCode(calls: string[][]) {
    return (available: string[], schema: ToolSchema): ToolSchema => {
      calls.push(available);
      return { name: 'renamed', description: `Tools: ${available.join(', ')}`, parameters: schema.parameters };
    };
  }

  void it('exports the sandbox tool list', () => {
    assert.deepEqual(
      [...SANDBOX_TOOLS],
      ['web_search', 'web_extract', 'read_file', 'write_file', 'search_files', 'patch', 'terminal'],
    );
  });

  void it('rebuilds execute_code with only the sandbox tools that survived filtering and checks', async () => {
    const calls: string[][] = [];
    const { tools, unknownToolsets } = await getToolDefinitions(
      registry(),
      { enabled: ['code_execution', 'file', 'web', 'bogus'], disabled: [] },
      { executeCode: buildExecuteCode(calls) },
    );
    // terminal not enabled, web_extract's check fails.
    assert.deepEqual(calls, [['web_search', 'read_file', 'write_file']]);
    assert.deepEqual(
      tools.find((t) => t.function.name === 'execute_code'),
      {
        type: 'function',
        function: {
          name: 'execute_code',
          description: 'Tools: web_search, read_file, write_file',
          parameters: { type: 'object', properties: {} },
        },
      },
    );
    assert.deepEqual(tools.map((t) => t.function.name), ['execute_code', 'read_file', 'web_search', 'write_file']);
    assert.deepEqual(unknownToolsets, ['bogus']);
  });

  void it('keeps the static execute_code schema without a patcher', async () => {
    const { tools } = await getToolDefinitions(registry(), { enabled: ['code_execution'] });
    assert.equal(tools[0]?.function.description, 'execute_code tool');
  });

  void it('drops the web hint from browser_navigate when no web tool is listed', async () => {
    const { tools } = await getToolDefinitions(registry(), { enabled: ['browser'] });
    assert.deepEqual(tools.map((t) => t.function.description), ['Open a URL in the browser. Returns a page snapshot.']);
  });

  void it('drops the web hint when the web tools are enabled but their checks fail', async () => {
    const { tools } = await getToolDefinitions(registry({ webSearchUp: false }), { enabled: ['browser', 'web'] });
    assert.deepEqual(tools.map((t) => t.function.name), ['browser_navigate']);
    assert.equal(tools[0]?.function.description, 'Open a URL in the browser. Returns a page snapshot.');
  });

  void it('keeps the web hint when a web tool is listed', async () => {
    const { tools } = await getToolDefinitions(registry(), { enabled: ['browser', 'web'] });
    assert.equal(tools.find((t) => t.function.name === 'browser_navigate')?.function.description, NAVIGATE_DESCRIPTION);
  });

  void it('drops the web hint when the web toolset is disabled', async () => {
    const { tools } = await getToolDefinitions(registry(), { disabled: ['web'] });
    assert.equal(
      tools.find((t) => t.function.name === 'browser_navigate')?.function.description,
      'Open a URL in the browser. Returns a page snapshot.',
    );
    assert.equal(tools.some((t) => t.function.name.startsWith('web_')), false);
  });
});
