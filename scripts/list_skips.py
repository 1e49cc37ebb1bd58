#!/usr/bin/env python3
"""Lists the tests a `make test` run skipped, grouped by reason (the last phase of make test).

The log (ALK_SKIP_LOG, one line per skip: run, test, reason) is appended by alk_tests
(tests/test_environment.cpp) and by pytest (python/tests/conftest.py); ctest's own log (the
second argument, build/Testing/Temporary/LastTest.log) adds the script tests that skipped
with a "SKIP: reason" line (ctest's skip code 77). Skips for a missing
device or package that ALK_REQUIRE names never get here: those tests fail (tests/required.h).
"""
import collections
import os
import re
import sys


def ctest_script_skips(path):
    """(test, reason) for each test of ctest's log whose output has a "SKIP: " line."""
    out = []
    test = None
    with open(path, errors="replace") as f:
        for line in f:
            m = re.match(r"^\d+/\d+ Test: (\S+)", line)
            if m:
                test = m.group(1)
            elif test and line.startswith("SKIP: "):
                out.append((test, line[len("SKIP: "):].strip()))
                test = None
    return out


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("ALK_SKIP_LOG", "")
    by_reason = collections.OrderedDict()
    count = 0
    if path and os.path.exists(path):
        with open(path) as f:
            for line in f:
                parts = line.rstrip("\n").split("\t")
                if len(parts) != 3:
                    continue
                run, test, reason = parts
                by_reason.setdefault(reason.strip() or "(no reason given)", []).append(f"{test} [{run}]")
                count += 1
    if len(sys.argv) > 2 and os.path.exists(sys.argv[2]):
        for test, reason in ctest_script_skips(sys.argv[2]):
            by_reason.setdefault(reason, []).append(f"{test} [ctest]")
            count += 1
    print(f"skipped tests: {count} (ALK_REQUIRE={os.environ.get('ALK_REQUIRE', '')!r}: a missing required "
          "device or package fails instead)")
    for reason, tests in sorted(by_reason.items(), key=lambda kv: -len(kv[1])):
        print(f"  {len(tests):4d}  {reason}")
        for t in tests[:8]:
            print(f"          {t}")
        if len(tests) > 8:
            print(f"          ... and {len(tests) - 8} more")
    return 0


if __name__ == "__main__":
    sys.exit(main())
