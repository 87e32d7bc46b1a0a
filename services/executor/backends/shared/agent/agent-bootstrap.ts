/**
 * Starting the exec agent in a sandbox that does not carry it (a cloud
 * sandbox, a Kubernetes pod): one exec runs a few lines of Python that read
 * the agent's archive (a known number of bytes, unbuffered, so not one byte
 * of the stream after it is taken) from stdin, import its package from
 * memory and run its __main__.py as `berth_agent.pyz --stdio`. Nothing is
 * written to the sandbox's disk, so a snapshot never carries a stale agent
 * and a command cannot swap the file the next start would run.
 */

/** The name the archive's modules carry (their `__file__` lies "inside" it) when read from stdin. */
const ARCHIVE_NAME = '<stdin>/berth_agent.pyz';

/**
 * Python (2-compatible syntax, so an old interpreter reaches the agent's own
 * version message) that reads `length` bytes of the agent's archive from fd
 * 0, puts an importer for its package first on sys.meta_path (nothing of the
 * sandbox's directories can stand in for it) and runs its __main__.py with
 * the arguments that follow `-c CODE`.
 */
export function bootstrapCode(length: number): string {
  return [
    'import os, sys',
    `n = ${length}`,
    "b = b''",
    'while len(b) < n:',
    '    c = os.read(0, n - len(b))',
    '    if not c:',
    '        sys.exit(3)',
    '    b += c',
    // Where the exec started (the image's working directory): commands read it to find the task's start directory.
    "os.environ['BERTH_SANDBOX_WORKDIR'] = os.getcwd()",
    'import io, zipfile',
    'z = zipfile.ZipFile(io.BytesIO(b))',
    'names = set(z.namelist())',
    `a = '${ARCHIVE_NAME}'`,
    'class Z(object):',
    '    def find_spec(self, name, path=None, target=None):',
    "        if name.split('.')[0] != 'berth_agent':",
    '            return None',
    "        base = name.replace('.', '/')",
    "        for file, pkg in ((base + '/__init__.py', True), (base + '.py', False)):",
    '            if file in names:',
    '                import importlib.util',
    "                spec = importlib.util.spec_from_loader(name, self, origin=a + '/' + file, is_package=pkg)",
    // So that the module's __file__ is set, as an archive's would be.
    '                spec.has_location = True',
    '                return spec',
    '        return None',
    '    def create_module(self, spec):',
    '        return None',
    '    def exec_module(self, module):',
    "        file = module.__spec__.origin[len(a) + 1:]",
    "        exec(compile(z.read(file), module.__spec__.origin, 'exec'), module.__dict__)",
    'sys.meta_path.insert(0, Z())',
    // The agent's own options (--stdio, --linger PATH, --resume PID) follow `-c CODE` on the exec's argv.
    "sys.argv = ['berth_agent.pyz'] + sys.argv[1:]",
    `exec(compile(z.read('__main__.py'), a + '/__main__.py', 'exec'), {'__name__': '__main__', '__file__': a + '/__main__.py'})`,
  ].join('\n');
}
