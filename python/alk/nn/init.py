"""alk.nn.init: initializers that write new values into a tensor in place (every holder of it,
a module included, sees them, and so do the views of it taken from Python). They draw from
alk's seeded generator (alk.manual_seed)."""
import functools as _functools

from .. import _C
from .._C.nn import init as _init


def _following(fn):
    @_functools.wraps(fn)
    def write(tensor, *args, **kwargs):
        out = fn(tensor, *args, **kwargs)
        _C._follow_assignment(tensor)  # the C++ initializer assigned a new node: views read it
        return out

    return write


kaiming_normal_ = _following(_init.kaiming_normal_)
kaiming_uniform_ = _following(_init.kaiming_uniform_)
normal_ = _following(_init.normal_)
ones_ = _following(_init.ones_)
uniform_ = _following(_init.uniform_)
xavier_normal_ = _following(_init.xavier_normal_)
xavier_uniform_ = _following(_init.xavier_uniform_)
zeros_ = _following(_init.zeros_)
