"""The archive as sandboxes get it: built the same every time, started by its __main__.py, which checks the
Python version and that the package it runs is its own."""
import os
import subprocess
import sys
import unittest
import zipfile

from berth_agent.protocol import VERSION, take_frame

from .support import TempDir, build_archive


class Archive(unittest.TestCase):
    def setUp(self):
        self.tmp = TempDir(self)
        self.archive = build_archive(self.tmp.path)

    def run_python(self, code):
        return subprocess.run([sys.executable, "-I", "-S", "-c", code, self.archive], stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)

    def test_the_same_sources_build_the_same_bytes(self):
        os.mkdir(self.tmp.join("again"))
        with open(self.archive, "rb") as a, open(build_archive(self.tmp.join("again")), "rb") as b:
            self.assertEqual(a.read(), b.read())

    def test_it_holds_the_entry_point_and_the_package_only(self):
        with zipfile.ZipFile(self.archive) as z:
            names = z.namelist()
            self.assertEqual(names, sorted(names))
            self.assertEqual(names[0], "__main__.py")
            self.assertEqual([n for n in names[1:] if not (n.startswith("berth_agent/") and n.endswith(".py"))], [])
            self.assertEqual({i.date_time for i in z.infolist()}, {(1980, 1, 1, 0, 0, 0)})

    def test_it_starts_isolated_and_says_hello(self):
        # stdin is a pipe the agent finds closed at once: a hello, then it ends with its stream.
        r = subprocess.run([sys.executable, "-I", "-S", self.archive, "--stdio"], input=b"", stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        header, _ = take_frame(bytearray(r.stdout))
        self.assertEqual((header["op"], header["version"], header["transport"]), ("hello", VERSION, "stdio"))

    def test_an_old_python_is_told_before_anything_is_imported(self):
        # Test double of an old interpreter: this one claiming to be 3.7, running the archive.
        r = self.run_python("import runpy, sys; sys.version_info = (3, 7, 9, 'final', 0); "
                            "runpy.run_path(sys.argv[1], run_name='__main__')")
        self.assertEqual(r.returncode, 4)
        self.assertEqual(r.stderr, b"berth-agent: python 3.8 or newer required, this is 3.7\n")

    def test_a_package_of_the_same_name_imported_first_is_not_run(self):
        r = self.run_python("import runpy, sys, types; m = types.ModuleType('berth_agent'); "
                            "m.__file__ = '/tmp/planted/berth_agent/__init__.py'; sys.modules['berth_agent'] = m; "
                            "runpy.run_path(sys.argv[1], run_name='__main__')")
        self.assertEqual(r.returncode, 6, r.stderr)
        self.assertIn(b"its package was imported from /tmp/planted, not from its archive", r.stderr)

    def test_a_bad_command_line_says_how_to_call_it(self):
        r = subprocess.run([sys.executable, "-I", "-S", self.archive, "--stdio", "--resume", "1"], stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
        self.assertEqual(r.returncode, 2)
        self.assertIn(b"usage: berth_agent.pyz --stdio", r.stderr)


if __name__ == "__main__":
    unittest.main()
