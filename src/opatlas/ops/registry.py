"""The op registry: names and aliases -> ``Op`` instances; user modules and entry points."""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import math
import sys
import warnings
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, TypeVar

from opatlas.errors import InvalidShape, OpatlasError, UnknownOpError
from opatlas.ops.base import Op

_OPS: dict[str, Op] = {}
_ALIASES: dict[str, tuple[str, dict[str, Any]]] = {}
_BUILTINS_LOADED = False
_ENTRY_POINTS_LOADED = False
# the modules of the built-in catalog, imported by _load_builtins (in this order)
BUILTIN_MODULES = ("opatlas.ops.basic", "opatlas.ops.transformer", "opatlas.tenstorrent.spec",
                   "opatlas.ops.faults")
USER_MODULE = "opatlas_user_ops_"  # the prefix of the names --ops-module files import under

T = TypeVar("T", bound=type[Op])


def register_op(cls: T) -> T:
    """Class decorator: instantiate and register an op under ``cls.name``.

    A user's op (a module of theirs, an entry point) named like a built-in op or alias is an
    error: either would silently win, depending on which module was imported last."""
    if not cls.name:
        raise OpatlasError(f"op class {cls.__name__} has no name")
    if cls.__module__ not in BUILTIN_MODULES:
        _load_builtins()  # first, so that a clash is seen whatever the import order
        _check_clash(cls)
    _OPS[cls.name] = cls()
    _REGISTERED_BY.update({cls.__module__, _caller_module()})
    return cls


def _check_clash(cls: type[Op]) -> None:
    """Refuse ``cls`` when its name is taken by a built-in op or alias (a user's op replacing
    another user's op, a module imported again, stays allowed)."""
    taken = _OPS.get(cls.name)
    builtin_op = taken is not None and type(taken).__module__ in BUILTIN_MODULES
    if builtin_op or cls.name in _ALIASES:
        what = "op" if builtin_op else f"alias (of {_ALIASES[cls.name][0]})"
        where = "" if cls.__module__.startswith(USER_MODULE) else f" ({cls.__module__})"
        raise OpatlasError(f"op class {cls.__name__}{where} is named {cls.name!r}, the name of "
                           f"a built-in {what}; give it another name (opatlas ops lists the "
                           f"built-in ones)")


def register_alias(alias: str, op: str, **fixed: Any) -> None:
    """``alias`` runs ``op`` with ``fixed`` parameters (e.g. ett's ``linear1`` = linear/qkv)."""
    _ALIASES[alias] = (op, dict(fixed))
    _REGISTERED_BY.add(_caller_module())


# the modules that registered an op or alias (the op classes' own modules, and those that made
# the call): an --ops-module imported before, by another one, answers by them
_REGISTERED_BY: set[str] = set()


def _caller_module() -> str:
    """The module whose code called the register function that calls this."""
    return str(sys._getframe(2).f_globals.get("__name__", ""))


def _load_builtins() -> None:
    global _BUILTINS_LOADED
    if not _BUILTINS_LOADED:
        _BUILTINS_LOADED = True
        for module in BUILTIN_MODULES:
            importlib.import_module(module)


def _load_entry_points() -> None:
    global _ENTRY_POINTS_LOADED
    if not _ENTRY_POINTS_LOADED:
        _ENTRY_POINTS_LOADED = True
        for ep in entry_points(group="opatlas.ops"):
            ep.load()


def get_op(name: str) -> tuple[Op, dict[str, Any]]:
    """The op for a name or alias, and the parameters the alias fixes."""
    _load_builtins()
    for attempt in range(2):
        if name in _OPS:
            return _OPS[name], {}
        if name in _ALIASES:
            target, fixed = _ALIASES[name]
            return get_op(target)[0], dict(fixed)
        if attempt == 0:
            _load_entry_points()
    raise UnknownOpError(f"unknown op {name!r}; known ops: {', '.join(list_ops())}")


def lacking_params(op: str, columns: list[str]) -> str | None:
    """What ``columns`` lack of the parameters catalog op ``op`` (or alias) needs, those
    without a default (``dim``, 'dim, which op 'linear1' (catalog op 'linear') needs: its
    parameters are b, l, dim (optional: mp, ...)'), else None. Without one the op's counts
    cannot be made and its model is a guess over the shape it has. An op outside the catalog
    (a user's op without its module) is not checked:
    its parameters are unknown."""
    try:
        cat, fixed = get_op(op)
    except OpatlasError:
        return None
    needed = [p for p in cat.params if p not in fixed]
    missing = [p for p in needed if p not in columns and p not in cat.defaults]
    if not missing:
        return None
    optional = ", ".join(p for p in cat.defaults if p not in fixed and p not in needed)
    alias = f" (catalog op {cat.name!r})" if cat.name != op else ""
    return (f"{', '.join(missing)}, which op {op!r}{alias} needs: its parameters are "
            f"{', '.join(needed)}" + (f" (optional: {optional})" if optional else ""))


def filed_as(name: str, stored: Iterable[str]) -> list[tuple[str, dict[str, Any]]]:
    """Where data lacking ``name`` files its rows: each of the ``stored`` names that is the
    same catalog op (``linear`` for ``linear1``; ``flash_atten`` for ``flash_attention``) and
    fixes nothing ``name`` contradicts (``linear3``, role ffn_up, is not ``linear1``), with
    the parameter values its rows must have (those ``name`` fixes and it does not; a row
    leaving one out has the op's default). Empty for a name outside the catalog."""
    try:
        target, fixed = get_op(name)
    except OpatlasError:
        return []
    out = []
    for other in stored:
        try:
            op, pre = get_op(other)
        except OpatlasError:
            continue
        if op is target and not any(k in pre and pre[k] != v for k, v in fixed.items()):
            out.append((other, {k: v for k, v in fixed.items() if k not in pre}))
    return out


def alias_of(name: str) -> tuple[str, dict[str, Any]] | None:
    """The op the alias ``name`` runs and the parameters it fixes; None for an op's own name
    (or a name outside the catalog)."""
    _load_builtins()
    if name in _OPS or name not in _ALIASES:
        return None
    target, fixed = _ALIASES[name]
    return target, dict(fixed)


def contradicted(fixed: Mapping[str, Any], params: Mapping[str, Any]) -> str | None:
    """The first parameter an alias fixes (``fixed``) that ``params`` gives another value:
    those vectors would measure another op (``linear1`` with role vocab is ``linear_final``)
    and file it under the alias's name."""
    return next((k for k, v in fixed.items() if k in params and params[k] != v), None)


def aliases_fixing(op: str, fixed: Mapping[str, Any]) -> list[str]:
    """The aliases of ``op`` that fix exactly ``fixed`` (``linear``, role vocab:
    ``linear_final``): what a spec contradicting an alias meant."""
    return [a for a, pre in aliases_of(op).items() if pre == dict(fixed)]


def aliases_of(op: str) -> dict[str, dict[str, Any]]:
    """Every alias of ``op`` and the parameters it fixes (``linear``: ``linear1`` role qkv,
    ``linear2`` role out, ...)."""
    _load_builtins()
    return {a: dict(pre) for a, (target, pre) in sorted(_ALIASES.items()) if target == op}


def list_ops(include_aliases: bool = False) -> list[str]:
    """The catalog's names (its built-in ops, those of loaded ``--ops-module`` files and of
    the ``opatlas.ops`` entry points), and its aliases when asked."""
    _load_builtins()
    _load_entry_points()
    names = [n for n in _OPS if not n.startswith("fault")]
    if include_aliases:
        names += list(_ALIASES)
    return sorted(names)


_LOADED: dict[str, bool] = {}  # what load_ops_module answered for each module it imported


def load_ops_module(path: str | Path) -> bool:
    """Import a user's module (a file path or a dotted name) so that its ops register; False
    when it registered no op or alias. A module imported before answers as it did then; one
    that something else imported (``os``, a library) answers by what it registered."""
    _load_builtins()  # a user module's clash check loads them anyway: keep them out of the count
    before = ({n: id(o) for n, o in _OPS.items()}, dict(_ALIASES))
    key = _module_name(path)
    if not _import_ops_module(path):
        return _LOADED.get(key, _defines_ops(key))
    _LOADED[key] = before != ({n: id(o) for n, o in _OPS.items()}, dict(_ALIASES))
    return _LOADED[key]


def _is_file_path(path: str | Path) -> bool:
    """Whether ``--ops-module`` names a file (``ops.py``, ``dir/ops``), not a module: a
    package folder given by its bare name (``mypkg``) is a module, as ``python -m`` finds it."""
    p = Path(path)
    if p.is_dir() and (p / "__init__.py").is_file() and str(path).isidentifier():
        return False
    return p.suffix == ".py" or p.exists()


def _module_name(path: str | Path) -> str:
    """The name ``path`` is imported under: a file's is derived from its resolved path."""
    p = Path(path)
    if _is_file_path(path):
        return f"{USER_MODULE}{abs(hash(str(p.resolve())))}"
    return str(path)


def _defines_ops(module: str) -> bool:
    """Whether ``module``, or a module inside it, registered an op or alias."""
    return any(m == module or m.startswith(module + ".") for m in _REGISTERED_BY)


def _import_ops_module(path: str | Path) -> bool:
    """Import ``path``; False when it was imported already (nothing ran)."""
    p = Path(path)
    if _is_file_path(path):
        if p.is_dir():
            raise OpatlasError(f"--ops-module {path}: is a folder; give a .py file, or a "
                               f"package by its importable name")
        if not p.is_file():
            raise OpatlasError(f"--ops-module {path}: no such file")
        mod_name = _module_name(p)
        if mod_name in sys.modules:
            return False
        spec = importlib.util.spec_from_file_location(mod_name, p)
        if spec is None or spec.loader is None:
            raise OpatlasError(f"--ops-module {path}: cannot be imported")
        module = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            del sys.modules[mod_name]  # a fixed file is imported again, not taken as loaded
            raise _import_error(str(path), exc) from None
    elif str(path) in sys.modules:
        return False
    else:
        _import_named(str(path))
    return True


def _import_named(name: str) -> None:
    """Import the module ``name``: from the Python path, else from the current directory, as
    ``python -m`` would find it (the ``opatlas`` console script does not put the current
    directory on the path). The current directory is on the path only while it imports."""
    try:
        importlib.import_module(name)
        return
    except ModuleNotFoundError as exc:
        if not _is_missing(name, exc):
            raise _import_error(name, exc) from None
    except Exception as exc:
        raise _import_error(name, exc) from None
    here = Path.cwd()
    if importlib.machinery.PathFinder.find_spec(name.partition(".")[0], [str(here)]) is None:
        raise OpatlasError(f"--ops-module {name}: no such module on the Python path nor in "
                           f"the current directory ({here}), nor a file of that name; give a "
                           f".py file or an importable module")
    try:
        with _cwd_on_path(here):
            importlib.import_module(name)
    except Exception as exc:
        raise _import_error(name, exc) from None


def _is_missing(name: str, exc: ModuleNotFoundError) -> bool:
    """Whether ``exc`` says that ``name`` itself (or its package) is missing, not a module
    that ``name`` imports."""
    return bool(exc.name) and (name == exc.name or name.startswith(f"{exc.name}."))


@contextmanager
def _cwd_on_path(cwd: Path) -> Iterator[None]:
    """The current directory ``cwd`` first on ``sys.path`` while the block runs (a module it
    imports stays imported; the path is as it was after)."""
    here = str(cwd)
    sys.path.insert(0, here)
    importlib.invalidate_caches()  # a file written since the last look is seen
    try:
        yield
    finally:
        with suppress(ValueError):
            sys.path.remove(here)


def _import_error(path: str, exc: Exception) -> OpatlasError:
    """Why importing the user's module ``path`` failed, and where (file and line)."""
    import traceback

    if isinstance(exc, SyntaxError):
        where = f"{exc.filename}, line {exc.lineno}"
        return OpatlasError(f"--ops-module {path}: syntax error in {where}: {exc.msg}")
    frames = traceback.extract_tb(exc.__traceback__)
    user = [f for f in frames if "importlib" not in f.filename]
    if isinstance(exc, OpatlasError):  # raised by opatlas: the user's line that called it
        here = str(Path(__file__).resolve().parent.parent)
        user = [f for f in user if not str(Path(f.filename).resolve()).startswith(here)]
    where = f" (at {user[-1].filename}, line {user[-1].lineno})" if user else ""
    first = next(iter(str(exc).splitlines()), "")  # one line, whatever the module raised
    if isinstance(exc, OpatlasError):  # opatlas refused something the module did: say what
        return OpatlasError(f"--ops-module {path}{where}: {first}")
    return OpatlasError(f"--ops-module {path}: importing it failed{where}: "
                        f"{type(exc).__name__}: {first}")


def resolved_params(op_name: str, params: Mapping[str, Any]) -> tuple[Op, dict[str, Any]]:
    """The op of ``op_name`` and ``params`` with the alias's fixed parameters and the op's
    defaults filled in. A parameter contradicting the alias is ``InvalidShape``, never
    measured: the row would file another op's timing under the alias's name."""
    op, fixed = get_op(op_name)
    key = contradicted(fixed, params)
    if key is not None:
        raise InvalidShape(f"op {op_name!r} is {op.name!r} with {key}={fixed[key]!r}; "
                           f"{key}={params[key]!r} is another op")
    return op, op.resolve({**fixed, **params})


def catalog_counts(op_name: str, params: Mapping[str, Any]
                   ) -> tuple[dict[str, float], dict[str, float]]:
    """(FLOPs, minimum bytes) per pass of a stored or measured row's op and parameters, as
    the catalog counts them; ({}, {}) where it cannot (an op it does not model, a shape it
    refuses): a count never loses a measurement."""
    try:
        op, full = resolved_params(op_name, params)
        if op.invalid_reason(full) is None:
            return (_real_counts(op_name, "flops", op.flops(full)),
                    _real_counts(op_name, "min_bytes", op.min_bytes(full)))
    except Exception:  # any failure to count leaves the row without counts
        pass
    return {}, {}


_BAD_COUNTS_SAID: set[tuple[str, str, str]] = set()


def _real_counts(op_name: str, kind: str, counts: Mapping[str, Any]) -> dict[str, Any]:
    """``counts`` without the values no count can take (negative, NaN, infinite: a user op's
    formula gone wrong), each (op, pass, kind) said once: the row keeps its measurement and
    records that count as unknown, rather than a GFLOP/s that means nothing."""
    good = {}
    for pass_, value in counts.items():
        try:
            real = math.isfinite(float(value)) and float(value) >= 0
        except (TypeError, ValueError):
            real = False
        if real:
            good[pass_] = value
        elif (key := (op_name, pass_, kind)) not in _BAD_COUNTS_SAID:
            _BAD_COUNTS_SAID.add(key)
            warnings.warn(f"{op_name} {pass_}: its {kind}() gave {value!r}, which is no count "
                          f"(negative, NaN or infinite): recorded as unknown", stacklevel=2)
    return good
