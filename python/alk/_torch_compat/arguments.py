"""Wrong arguments to pybind11-bound functions raise TypeError naming the argument and the
caller's line, instead of pybind11's list of signatures."""
import builtins

from .. import _C
from .._C import Tensor

_caller = _C._caller


# ---- wrong arguments: which one, and the caller's line (not pybind11's signature list) ----

import re as _re

_OVERLOAD = _re.compile(r"^\s*\d+\. \((.*)\) -> .*$")


def _split_params(text):
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    params = []
    for p in out:
        if p in ("*", "/") or p.startswith("*"):
            continue
        name, _, rest = p.partition(":")
        params.append((name.strip(), rest.split("=")[0].strip(), "=" in rest))
    return params


def _fits(value, annotation):
    a = annotation.replace("alk._C.", "")
    if a.startswith("Optional["):
        return value is None or _fits(value, a[len("Optional["):-1])
    if " | " in a:
        return builtins.any(_fits(value, part) for part in a.split(" | "))
    if a == "Tensor":
        return isinstance(value, Tensor) or value is None
    if a == "int":
        return not isinstance(value, (float, str)) and hasattr(value, "__index__")
    if a == "float":
        return not isinstance(value, str) and (hasattr(value, "__float__") or hasattr(value, "__index__"))
    if a == "bool":
        return isinstance(value, bool) or hasattr(value, "__bool__") and not isinstance(value, (str, list, tuple))
    if a == "str":
        return isinstance(value, str)
    if a.startswith(("List[", "Sequence[", "Tuple[")) or a.startswith("Annotated[List"):
        return isinstance(value, (list, tuple))
    if a == "dtype":
        return isinstance(value, _C.dtype)
    return True


def _explain(name, doc_error, args, kwargs, is_method=False):
    """A TypeError naming the first argument that does not fit the first signature it could match."""
    overloads = [_split_params(m.group(1)) for line in doc_error.splitlines() if (m := _OVERLOAD.match(line))]
    where = f"(at {_caller()})"
    first = None
    for params in overloads:
        problem = None
        positional = [p for p in params]
        if len(args) > len(positional):
            problem = (f"takes at most {len(positional) - is_method} positional arguments but "
                       f"{len(args) - is_method} were given")
        else:
            for i, (value, (pname, ann, _)) in enumerate(zip(args, positional)):
                if not _fits(value, ann):
                    expected = ann.replace("alk._C.", "")
                    problem = (f"argument '{pname}' (position {i + 1 - is_method}) must be {expected}, "
                               f"not {type(value).__name__}")
                    break
            names = {p[0] for p in params}
            for k, value in kwargs.items():
                if problem:
                    break
                if k not in names:
                    problem = f"got an unexpected keyword argument '{k}'"
                else:
                    ann = next(p[1] for p in params if p[0] == k)
                    if not _fits(value, ann):
                        problem = f"argument '{k}' must be {ann.replace('alk._C.', '')}, not {type(value).__name__}"
            if not problem:
                given = set(p[0] for p in params[:len(args)]) | set(kwargs)
                missing = [p[0] for p in params if not p[2] and p[0] not in given and p[0] != "self"]
                if missing:
                    problem = f"missing required argument '{missing[0]}'"
        if problem is None:
            continue
        first = first or problem
    return TypeError(f"{name}(): {first or 'incompatible arguments'} {where}")


def _translated(name, error, args, kwargs, is_method):
    """The TypeError to raise instead of pybind11's argument error (None: not one)."""
    text = str(error)
    if isinstance(error, TypeError) and "incompatible function arguments" in text:
        return _explain(name, text, args, kwargs, is_method)
    if isinstance(error, RuntimeError) and text.startswith("Unable to cast Python instance of type"):
        got = _re.search(r"<class '([^']+)'>", text)
        return TypeError(f"{name}(): an argument of type {got.group(1) if got else '?'} does not fit "
                         f"{text.split(' to C++ type ')[-1]} (at {_caller()})")
    return None


def _checked(name, fn, is_method):
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (TypeError, RuntimeError) as e:
            better = _translated(name, e, args, kwargs, is_method)
            if better is None:
                raise
            raise better from None

    call.__name__, call.__doc__, call.__qualname__ = fn.__name__, fn.__doc__, fn.__name__
    call.__wrapped_builtin__ = fn
    return call


def _check_arguments(namespace, tensor_cls):
    """Wraps the pybind11 functions of namespace (a module's dict) and tensor_cls's methods."""
    for name, fn in list(namespace.items()):
        if not name.startswith("_") and type(fn).__name__ == "builtin_function_or_method":
            namespace[name] = _checked(name, fn, False)
    for name, fn in list(vars(tensor_cls).items()):
        if not name.startswith("_") and type(fn).__name__ == "instancemethod":
            setattr(tensor_cls, name, _checked(name, fn, True))
