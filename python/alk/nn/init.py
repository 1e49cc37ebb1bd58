"""alk.nn.init: initializers that write new values into a tensor in place (every holder of it,
a module included, sees them). They draw from alk's seeded generator (alk.manual_seed)."""
from .._C.nn.init import (kaiming_normal_, kaiming_uniform_, normal_, ones_, uniform_,  # noqa: F401
                           xavier_normal_, xavier_uniform_, zeros_)
