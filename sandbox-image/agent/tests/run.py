"""Runs the agent's unit tests and prints one JSON line per test on stdout:
{"test": id, "outcome": "ok" | "fail" | "error" | "skip" | ..., "detail": text}.
test/unit/agent-python.test.ts runs it, so each test counts in the suite;
`python3 -B -m unittest discover -s tests -t .` in sandbox-image/agent/ runs
the same tests for a person. Exit status 0 when every test passed."""
import json
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


class JsonLines(unittest.TestResult):
    def report(self, test, outcome, detail=""):
        sys.stdout.write(json.dumps({"test": test.id(), "outcome": outcome, "detail": detail}) + "\n")
        sys.stdout.flush()

    def addSuccess(self, test):
        unittest.TestResult.addSuccess(self, test)
        self.report(test, "ok")

    def addFailure(self, test, err):
        unittest.TestResult.addFailure(self, test, err)
        self.report(test, "fail", self.failures[-1][1])

    def addError(self, test, err):
        unittest.TestResult.addError(self, test, err)
        self.report(test, "error", self.errors[-1][1])

    def addSkip(self, test, reason):
        unittest.TestResult.addSkip(self, test, reason)
        self.report(test, "skip", reason)

    def addExpectedFailure(self, test, err):
        unittest.TestResult.addExpectedFailure(self, test, err)
        self.report(test, "expected-failure")

    def addUnexpectedSuccess(self, test):
        unittest.TestResult.addUnexpectedSuccess(self, test)
        self.report(test, "unexpected-success")


def main():
    sys.path.insert(0, ROOT)
    suite = unittest.defaultTestLoader.discover(HERE, top_level_dir=ROOT)
    result = JsonLines()
    suite.run(result)
    return 0 if result.wasSuccessful() and not result.skipped else 1


if __name__ == "__main__":
    sys.exit(main())
