"""Grad mode (enable_grad inside no_grad), backward's keywords, tensor hooks and retain_grad."""
import threading

from .. import _C
from .._C import Tensor

_caller = _C._caller


# ---- grad mode ----

_grad_mode = threading.local()


def _active_no_grad():
    """This thread's open alk.no_grad() guards, innermost last (enable_grad suspends them)."""
    if not hasattr(_grad_mode, "guards"):
        _grad_mode.guards = []
    return _grad_mode.guards


class enable_grad:
    """Records autograd history again inside alk.no_grad() (context manager and decorator)."""

    def __enter__(self):
        active = _active_no_grad()
        self._suspended = list(active)
        for guard in reversed(self._suspended):
            guard.__exit__(None, None, None)
        active.clear()
        return self

    def __exit__(self, *exc):
        active = _active_no_grad()
        for guard in self._suspended:
            guard.__enter__()
            active.append(guard)
        return False

    def __call__(self, fn):
        import functools

        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with enable_grad():
                return fn(*args, **kwargs)

        return wrapped


class set_grad_enabled:
    """set_grad_enabled(False) is no_grad(), set_grad_enabled(True) is enable_grad()."""

    def __init__(self, mode):
        from .. import no_grad
        self._inner = no_grad() if not mode else enable_grad()

    def __enter__(self):
        self._inner.__enter__()
        return self

    def __exit__(self, *exc):
        return self._inner.__exit__(*exc)



# ---- backward's keyword arguments ----

_C_backward = Tensor.backward


def _backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
    """Computes gradients of this tensor (a scalar, or seeded with gradient) into the leaves' .grad.
    retain_graph is accepted, but alk frees what the backward rules saved: a second backward
    through the same graph raises. create_graph and inputs are refused."""
    if create_graph:
        raise NotImplementedError(f"backward(create_graph=True) is not supported by alk; use alk.grad("
                                  f"create_graph=True) (at {_caller()})")
    if inputs is not None:
        raise NotImplementedError(f"backward(inputs=...) is not supported by alk (at {_caller()})")
    return _C_backward(self, gradient)


Tensor.backward = _backward



# ---- tensor hooks and retain_grad ----

class _RemovableHandle:
    """What register_hook returns: remove() turns the hook off."""

    def __init__(self, state):
        self._state = state

    def remove(self):
        """Turns the hook off."""
        self._state["on"] = False


def _register_hook(self, hook):
    """Calls hook(grad) with this tensor's gradient during backward; a tensor it returns replaces
    the gradient. Register it before the tensor is used (alk refuses otherwise); leaves refuse."""
    state = {"on": True}

    def call(grad):
        return hook(grad) if state["on"] else None

    _C._register_hook(self, call)
    return _RemovableHandle(state)


def _retain_grad(self):
    """Keeps this non-leaf tensor's gradient in .grad after backward (a no-op on leaves). Call it
    before the tensor is used (alk refuses otherwise)."""
    _C._retain_grad(self)


Tensor.register_hook = _register_hook
Tensor.retain_grad = _retain_grad
