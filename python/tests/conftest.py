import os
import sys

import numpy as np
import pytest


def pytest_configure(config):
    """ALK_REQUIRE (tests/required.h) names what this run must have: a missing `torch` is a
    failure of the run, not skipped PyTorch comparisons."""
    required = os.environ.get("ALK_REQUIRE", "").replace(",", " ").split()
    if "torch" in required:
        try:
            import torch  # noqa: F401
        except ImportError as e:
            raise pytest.UsageError(f"torch is required here (ALK_REQUIRE={os.environ['ALK_REQUIRE']}) but missing: {e}")

# Run against the built package (build/python) unless alk is importable already (pip install).
_here = os.path.dirname(os.path.abspath(__file__))
_built = os.path.join(_here, "..", "..", "build", "python")
try:
    import alk  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.abspath(_built))
    import alk  # noqa: F401


def pytest_runtest_logreport(report):
    """Each skip, with its reason, into $ALK_SKIP_LOG (make test lists them at the end)."""
    log = os.environ.get("ALK_SKIP_LOG")
    if not log or not report.skipped:
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    with open(log, "a") as f:
        f.write("pytest\t" + report.nodeid + "\t" + reason.replace("\n", " ").replace("\t", " ") + "\n")


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def this_line(offset=0):
    """'file.py:N' of the caller's line (+ offset), as alk's errors name it."""
    f = sys._getframe(1)
    return f"{f.f_code.co_filename}:{f.f_lineno + offset}"
