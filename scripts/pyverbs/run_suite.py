#!/usr/bin/env python3
"""Runs rdma-core's pyverbs test suite (its `tests` package, as its own
run_tests.py loads it) and writes one JSON record per test: its id, its
outcome (pass, fail, error, skip) and, for a skip, the reason; for a
failure or error, the traceback, and in "output" what the test printed
(its processes too: the rdmacm tests' two sides print their own errors,
"Player active got: ...", which the parent's exception does not carry).
Each test's file descriptors 1 and 2 go to a file while it runs; what it
printed is then copied to stderr, so the log reads as without it.

Usage: run_suite.py SUITE_DIR OUT.json [unittest names...]
SUITE_DIR holds the suite's `tests/` directory. Run it under softroce-run
(or on a host with kernel rxe), with Debian's python3-pyverbs.
"""
import json
import os
import sys
import tempfile
import traceback
import unittest
from importlib.machinery import SourceFileLoader


class Recorder(unittest.TextTestResult):
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.records = []

    def _add(self, test, outcome, detail=""):
        self.records.append({"id": test.id(), "outcome": outcome, "detail": detail})

    def startTest(self, test):
        sys.stdout.flush()
        sys.stderr.flush()
        self._captured = tempfile.TemporaryFile()
        self._saved = (os.dup(1), os.dup(2))
        os.dup2(self._captured.fileno(), 1)
        os.dup2(self._captured.fileno(), 2)
        super().startTest(test)

    def stopTest(self, test):
        super().stopTest(test)
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, saved in zip((1, 2), self._saved):
            os.dup2(saved, fd)
            os.close(saved)
        self._captured.seek(0)
        text = self._captured.read().decode(errors="replace")
        self._captured.close()
        sys.stderr.write(text)
        sys.stderr.flush()
        last = self.records[-1] if self.records else None
        if last and last["id"] == test.id() and last["outcome"] in ("fail", "error"):
            last["output"] = text[-4000:]

    def addSuccess(self, test):
        super().addSuccess(test)
        self._add(test, "pass")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._add(test, "fail", "".join(traceback.format_exception(*err)))

    def addError(self, test, err):
        super().addError(test, err)
        self._add(test, "error", "".join(traceback.format_exception(*err)))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._add(test, "skip", str(reason))

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._add(test, "pass", "expected failure")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._add(test, "fail", "unexpected success")


def main():
    suite_dir, out = sys.argv[1], sys.argv[2]
    names = sys.argv[3:]
    sys.path.insert(0, os.path.join(suite_dir, "tests"))
    sys.path.insert(0, suite_dir)
    # The suite's own argument parser (device, port, GID) reads sys.argv.
    sys.argv = [sys.argv[0]]
    from args_parser import parser

    parser.parse_args()
    tests = SourceFileLoader("tests", os.path.join(suite_dir, "tests", "__init__.py")).load_module()
    loader = unittest.TestLoader()
    suite = loader.loadTestsFromNames(names, tests) if names else loader.loadTestsFromModule(tests)
    runner = unittest.TextTestRunner(verbosity=2, resultclass=Recorder, stream=sys.stderr)
    result = runner.run(suite)
    with open(out, "w") as f:
        json.dump(result.records, f, indent=1)


if __name__ == "__main__":
    main()
