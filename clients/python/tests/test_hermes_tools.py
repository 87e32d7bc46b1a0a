"""hermes_tools from outside: same functions and signatures as the sandbox's
module, and a script written for execute_code gives the same output run
either way."""
import importlib.util
import inspect
import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import unittest

from berth_client import Berth

from . import support

CLIENT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A seed-like script: write a file, edit it, read it back, search, run a command.
SCRIPT = textwrap.dedent(
    """\
    import json
    from hermes_tools import patch, read_file, search_files, shell_quote, terminal, write_file

    d = {dir!r}
    path = d + "/report.txt"
    write_file(path, "line one\\nline two\\n")
    patch(path, old_string="two", new_string="2")
    content = read_file(path)["content"]
    hits = search_files("line", path=d)["matches"]
    count = terminal("wc -l < " + shell_quote(path))["output"].strip()
    print(json.dumps({{"content": content, "hits": len(hits), "count": count}}))
    """
)


def bare_signature(fn):
    """Names, kinds and defaults of fn's parameters: what a caller depends on (annotations aside)."""
    sig = inspect.signature(fn)
    params = [p.replace(annotation=inspect.Parameter.empty) for p in sig.parameters.values()]
    return str(sig.replace(parameters=params, return_annotation=inspect.Signature.empty))


def run_outside(script, env):
    """Runs a script as a user would: its own python process, hermes_tools from clients/python."""
    full_env = {**os.environ, "PYTHONPATH": CLIENT_ROOT, **env}
    return subprocess.run(
        [sys.executable, "-c", script], env=full_env, capture_output=True, text=True, timeout=120, check=False
    )


class HermesToolsTest(unittest.TestCase):
    def setUp(self):
        self.dir = support.scratch_dir()
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.berth = Berth(support.server())
        self.addCleanup(self.berth.close)

    def task(self, prefix):
        t = self.berth.task(support.task_id(prefix))
        self.addCleanup(t.end)
        return t

    def test_same_names_and_signatures_as_the_sandbox_module(self):
        spec = importlib.util.spec_from_file_location("sandbox_hermes_tools", support.need("BERTH_TEST_SANDBOX_HERMES_TOOLS"))
        sandbox = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sandbox)
        sys.path.insert(0, CLIENT_ROOT)
        import hermes_tools as outside

        self.assertEqual(sorted(outside.__all__), sorted(sandbox.__all__))
        for name in sandbox.__all__:
            theirs, ours = getattr(sandbox, name), getattr(outside, name)
            if inspect.isclass(theirs):
                self.assertTrue(issubclass(ours, RuntimeError), name)
                continue
            self.assertEqual(bare_signature(ours), bare_signature(theirs), name)

    def test_a_script_gives_the_same_output_outside_and_in_execute_code(self):
        outside_dir = os.path.join(self.dir, "outside")
        inside_dir = os.path.join(self.dir, "inside")
        task = self.task("py-hermes-out")
        proc = run_outside(SCRIPT.format(dir=outside_dir), {"BERTH_SERVER": support.server(), "BERTH_TASK": task.task_id})
        self.assertEqual(proc.returncode, 0, proc.stderr)
        outside = json.loads(proc.stdout)
        self.assertEqual(outside, {"content": "1|line one\n2|line 2", "hits": 2, "count": "2"})
        # The script acted on the task named by BERTH_TASK, in the real file system.
        with open(os.path.join(outside_dir, "report.txt"), encoding="utf-8") as f:
            self.assertEqual(f.read(), "line one\nline 2\n")

        inside = self.task("py-hermes-in").execute_code(SCRIPT.format(dir=inside_dir))
        self.assertEqual(inside["status"], "success", inside)
        self.assertEqual(json.loads(inside["output"]), outside)

    def test_the_task_keeps_state_between_script_runs(self):
        task = self.task("py-hermes-state")
        env = {"BERTH_SERVER": support.server(), "BERTH_TASK": task.task_id}
        first = run_outside(f"from hermes_tools import terminal\nterminal('cd {self.dir}')", env)
        self.assertEqual(first.returncode, 0, first.stderr)
        second = run_outside("from hermes_tools import terminal\nprint(terminal('pwd')['output'])", env)
        self.assertEqual(second.stdout.strip(), self.dir)
        self.assertEqual(task.terminal("pwd")["output"], self.dir)

    def test_nobody_is_asked_from_a_script(self):
        # approvals.non_interactive defaults to approve: the command runs instead of waiting for an answer.
        task = self.task("py-hermes-approval")
        script = "from hermes_tools import terminal\nimport json\nprint(json.dumps(terminal(\"bash -c 'echo ran'\")))"
        proc = run_outside(script, {"BERTH_SERVER": support.server(), "BERTH_TASK": task.task_id})
        self.assertEqual(proc.returncode, 0, proc.stderr)
        result = json.loads(proc.stdout)
        self.assertEqual(result["output"], "ran")
        self.assertNotEqual(result.get("status"), "pending_approval")

    def test_an_unreachable_server_raises_hermes_tools_error(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        script = (
            "from hermes_tools import terminal, HermesToolsError\n"
            "try:\n    terminal('true')\nexcept HermesToolsError as e:\n    print('raised', e)\n"
        )
        proc = run_outside(script, {"BERTH_SERVER": f"127.0.0.1:{port}", "BERTH_TASK": "t"})
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertTrue(proc.stdout.startswith("raised terminal: UNAVAILABLE"), proc.stdout)


if __name__ == "__main__":
    unittest.main()
