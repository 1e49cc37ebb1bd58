import os
import sys

import numpy as np
import pytest

# Run against the built package (build/python) unless alk is importable already (pip install).
_here = os.path.dirname(os.path.abspath(__file__))
_built = os.path.join(_here, "..", "..", "build", "python")
try:
    import alk  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.abspath(_built))
    import alk  # noqa: F401


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def this_line(offset=0):
    """'file.py:N' of the caller's line (+ offset), as alk's errors name it."""
    f = sys._getframe(1)
    return f"{f.f_code.co_filename}:{f.f_lineno + offset}"
