"""The helpers a test compares with, guarded (part of the course's pytest plugin).

Learner code shares the test process. Before any of it loads (collection imports it), the
plugin keeps the comparison helpers and builtins the tests rely on; after each test it
checks they are still those objects. A replaced one is tampering (the grader scores the
stage 0; pytest and `course check` say so) and is put back.

`course.pytest_plugin` calls `keep_guarded` before collection, `replaced_helpers` after each
test and `lying_classes` at the end of the session; `GUARD_HOOK` (on `sys.meta_path`) keeps a
late-imported module's helpers (torch) as soon as it has loaded.
"""

from __future__ import annotations

import sys
import types

import pytest

GUARDED = (
    ("builtins", ("isinstance", "issubclass", "len", "abs", "all", "any", "sum", "min", "max", "sorted",
                  "round", "bool", "int", "float", "str", "repr", "type", "hasattr", "getattr", "iter", "next")),
    ("math", ("isclose", "isfinite", "isnan")),
    ("numpy", ("allclose", "array_equal", "array_equiv", "isclose", "all", "any", "isfinite", "asarray")),
    ("numpy.testing", ("assert_allclose", "assert_array_equal", "assert_equal", "assert_array_almost_equal",
                       "assert_almost_equal", "assert_array_less", "assert_raises", "assert_array_max_ulp")),
    ("torch", ("allclose", "equal", "isclose", "all", "any", "isfinite", "is_tensor")),
    ("torch.testing", ("assert_close",)),
    ("pytest", ("approx", "raises", "warns", "fail", "skip")),
)
_guarded_originals: dict[tuple[str, str], object] = {}
TAMPER_KEY = pytest.StashKey[list]()


_written: list[str] = []  # guarded names assigned since the last check, even if put back since
_watched: set[str] = set()  # the guarded modules whose attribute writes are seen


class _WatchedModule(types.ModuleType):
    """A guarded module's class while tests run: assigning one of its guarded names (or its
    class) is recorded, so a helper swapped only for the length of a call is seen too."""

    def __setattr__(self, name, value):
        if name == "__class__" or (self.__name__, name) in _guarded_originals:
            _written.append(f"{self.__name__}.{name}")
        super().__setattr__(name, value)

    def __delattr__(self, name):
        if (self.__name__, name) in _guarded_originals:
            _written.append(f"{self.__name__}.{name}")
        super().__delattr__(name)


# Modules too slow to import for a test that does not need them (torch: seconds): they are
# guarded when they are first imported (by a test, a fixture or the learner's code), from an
# import hook that runs the moment the module's own code has finished, before the importer
# (learner code included) gets the module back. A guarded module present without having been
# kept (imported around the hook) is tampering too.
LATE = ("torch", "torch.testing")
_LATE_PREFIX = tuple(m.split(".")[0] for m in LATE)


def _keep(mod: str, m: types.ModuleType) -> None:
    names = dict(GUARDED)[mod]
    for name in names:
        if name in m.__dict__:
            _guarded_originals.setdefault((mod, name), m.__dict__[name])
    if type(m) is types.ModuleType:
        try:
            m.__class__ = _WatchedModule
            _watched.add(mod)
        except TypeError:
            pass
    _kept.add(mod)


_kept: set[str] = set()  # the guarded modules whose originals are kept


def _keep_loaded_late() -> None:
    for mod in LATE:
        m = sys.modules.get(mod)
        if m is not None and mod not in _kept and isinstance(m, types.ModuleType):
            _keep(mod, m)


class _KeepAfterExec:
    """The loader of a late-guarded module, wrapped: its helpers are kept once it has run."""

    def __init__(self, inner, name: str):
        self._inner, self._name = inner, name

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        self._inner.exec_module(module)
        if self._name not in _kept:  # this module only: its parent may still be initialising
            _keep(self._name, module)

    def __getattr__(self, name):  # get_resource_reader, is_package, get_source, ...
        return getattr(self._inner, name)


class _GuardOnImport:
    """A meta path finder that only wraps the loaders of the LATE modules (and finds nothing
    itself), so `import torch` keeps torch's helpers before anyone can replace them."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in LATE or fullname in _kept:
            return None

        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _KeepAfterExec(spec.loader, fullname)
                return spec
        return None


GUARD_HOOK = _GuardOnImport()


def keep_guarded() -> None:
    import importlib
    import importlib.util

    for mod, _names in GUARDED:
        if mod in LATE:
            continue
        try:
            if mod not in sys.modules and importlib.util.find_spec(mod.split(".")[0]) is None:
                continue
            m = importlib.import_module(mod)
        except Exception:
            continue
        _keep(mod, m)
    _keep_loaded_late()
    if GUARD_HOOK not in sys.meta_path:
        sys.meta_path.insert(0, GUARD_HOOK)


def _unkept_late() -> list[str]:
    """LATE modules loaded without passing the hook (the learner removed it or loaded the
    module by hand): their helpers were never kept, so that is reported as tampering."""
    if not _kept and GUARD_HOOK not in sys.meta_path:
        return []  # the guard was never set up (not a test session)
    out = []
    for mod in LATE:
        if mod in sys.modules and mod not in _kept:
            out.append(f"{mod} (imported around the course's import guard)")
            m = sys.modules[mod]
            if isinstance(m, types.ModuleType):
                _keep(mod, m)
    if GUARD_HOOK not in sys.meta_path:
        out.append("sys.meta_path (the course's import guard removed)")
        sys.meta_path.insert(0, GUARD_HOOK)
    return out


def replaced_helpers() -> list[str]:
    """The guarded helpers that are no longer the originals, or were assigned at all since
    the last check (each is put back), and learner-defined classes that can lie in a comparison."""
    out = list(dict.fromkeys(_written))
    _written.clear()
    out += _unkept_late()
    for (mod, name), orig in _guarded_originals.items():
        m = sys.modules.get(mod)
        if m is None:
            continue
        try:
            if mod in _watched and type(m) is not _WatchedModule:
                out.append(f"{mod}.__class__")
                types.ModuleType.__setattr__(m, "__class__", _WatchedModule)
            now = m.__dict__.get(name, None)
            if now is not orig:
                out.append(f"{mod}.{name}")
                m.__dict__[name] = orig
        except Exception:  # a module whose attributes cannot be read or set: report it
            out.append(f"{mod}.{name}")
    return list(dict.fromkeys(out + lying_classes()))


# comparison, truth and array-protocol hooks: a learner's subclass of an array or number
# type that defines one can make a test's comparison agree with anything
_LYING_HOOKS = ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__bool__", "__array_ufunc__",
                "__array_function__", "__array_wrap__", "__array_priority__", "__torch_function__",
                "__torch_dispatch__", "__float__", "__index__", "__int__")


def lying_classes() -> list[str]:
    """Subclasses of numpy's arrays and scalars, torch.Tensor and the builtin numbers,
    strings and containers that the learner's package defines with their own comparison or
    array hooks (a learner's class is one whose module is `course_student.*`)."""
    if not any(k.startswith("course_student.") for k in sys.modules):
        return []
    bases: list[type] = [float, int, complex, str, bytes, tuple, list, dict, set, frozenset]
    np_ = sys.modules.get("numpy")
    if np_ is not None:
        bases += [np_.ndarray, np_.generic]
    torch = sys.modules.get("torch")
    if torch is not None:
        bases.append(torch.Tensor)
    out, seen, todo = [], set(), list(bases)
    while todo and len(seen) < 100_000:
        cls = todo.pop()
        try:
            subs = type.__subclasses__(cls)
        except TypeError:
            continue
        for sub in subs:
            if id(sub) in seen:
                continue
            seen.add(id(sub))
            todo.append(sub)
            mod = type.__getattribute__(sub, "__module__") if isinstance(sub, type) else ""
            if isinstance(mod, str) and mod.startswith("course_student"):
                hooks = [h for h in _LYING_HOOKS if h in type.__getattribute__(sub, "__dict__")]
                if hooks:
                    out.append(f"{mod}.{sub.__qualname__} (a subclass of {cls.__qualname__} "
                               f"defining {', '.join(hooks[:3])})")
    return out
