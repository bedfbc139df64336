"""Load a spec from a file, a built-in name, or a mapping; every failure is a ``SpecError``."""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from opatlas.errors import SpecError, UnknownOpError
from opatlas.spec.model import ParamError, SweepSpec
from opatlas.yaml_io import load_yaml

if TYPE_CHECKING:
    from opatlas.ops.base import Op

ETT_KEYS = ("starts", "steps", "ends", "operators")


def _builtin_path(name: str) -> Path | None:
    candidate = resources.files("opatlas") / "specs" / f"{name}.yml"
    return Path(str(candidate)) if candidate.is_file() else None


def resolve_spec(name_or_path: str | Path) -> SweepSpec:
    """A spec by path, or by the name of a built-in spec (``opatlas sweep list``)."""
    path = Path(name_or_path)
    if path.exists():
        return load_spec(path)
    builtin = _builtin_path(str(name_or_path))
    if builtin is not None:
        return load_spec(builtin, note_defaults=False)
    from opatlas.sweep.builtin import builtin_spec  # local: builtin specs may import ops

    spec = builtin_spec(str(name_or_path))
    if spec is not None:
        return spec
    raise SpecError("no such spec file, and no built-in spec of that name",
                    file=str(name_or_path))


def load_spec(path: str | Path, *, note_defaults: bool = True) -> SweepSpec:
    """The spec in the file ``path``. ``note_defaults``: say on stderr the dtype its vectors
    take when the file gives none (off for the built-in specs: opatlas chose it, not the
    user)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise SpecError(f"cannot read the file: {exc.strerror}", file=str(path)) from None
    except UnicodeDecodeError:
        raise SpecError("not a text (YAML) file: it is not valid UTF-8 (a binary file such "
                        "as a store or a parquet table?)", file=str(path)) from None
    data = load_yaml(text, str(path))
    if not isinstance(data, Mapping):
        raise SpecError("a spec must be a YAML mapping at the top level", file=str(path),
                        value=type(data).__name__)
    data = dict(data)
    data.setdefault("name", path.stem)
    spec = spec_from_mapping(data, file=str(path))
    if note_defaults:
        _note_dtype(spec, data, str(path))
    return spec


def _note_dtype(spec: SweepSpec, data: Mapping[str, Any], file: str) -> None:
    """Say the dtype a spec's vectors take when the file gives none (``dtype``, ``fixed.dtype``
    or a ``dtype`` parameter): they would otherwise be measured at it unannounced."""
    if data.get("dtype") == spec.dtype or "dtype" in spec.fixed or \
            "dtype" in spec.param_names():
        return
    from opatlas.ops.base import DTYPE_BYTES

    if spec.source == "ett":
        why = (f"an estimate-train-time config has no dtype: its vectors are {spec.dtype}, the "
               f"precision its sampling runs at")
    else:
        why = (f"no dtype given: its vectors are {spec.dtype}, the default (set dtype: to one "
               f"of {', '.join(DTYPE_BYTES)} to choose)")
    print(f"opatlas: note: {file}: {why}", file=sys.stderr)


def spec_from_mapping(data: Mapping[str, Any], *, file: str = "<spec>") -> SweepSpec:
    """Validate a mapping in either dialect; check the op exists and gets the parameters it needs."""
    data = dict(data)
    if "kernel_name" in data or any(k in data for k in ETT_KEYS):
        converted = _from_ett(data, file)  # checks the columns and the four lists
        try:
            return _validated(converted, file)
        except SpecError as exc:
            raise _in_ett_terms(exc, data) from None
    return _validated(data, file)


def _validated(data: dict[str, Any], file: str) -> SweepSpec:
    if "name" not in data and isinstance(data.get("op"), str):
        data["name"] = data["op"]
    if data.get("source") != "builtin" and "op" in data:
        _refuse_builtin_only(data["op"], file)
    try:
        spec = SweepSpec.model_validate(data)
    except ValidationError as exc:
        raise spec_error(exc, data, file) from None
    _check_given_once(spec, file)
    _check_op(spec, file)
    return spec


def _check_given_once(spec: SweepSpec, file: str) -> None:
    """A parameter is given in one place: the grid takes ``fixed`` over ``params`` and either
    over the top-level ``dtype``, so the other would be silently ignored (or, ``fixed`` over
    ``params``, expand into the same vector once per value)."""
    given: dict[str, str] = {}
    if "dtype" in spec.model_fields_set and spec.source != "ett":  # ett: opatlas's fp16
        given["dtype"] = "dtype"
    keys = [(f"params.{key}", name) for key, name in spec.axis_names()]
    keys += [(f"fixed.{name}", name) for name in spec.fixed]
    for key, name in keys:
        if name in given:
            first = given[name]
            raise SpecError(f"{name} is given twice, as {first} and as {key} (the vectors "
                            f"would take {key} and ignore {first}): give it in one place",
                            file=file, key=first, value=_written(spec, first))
        given[name] = key


def _written(spec: SweepSpec, key: str) -> Any:
    """The value of ``key`` (``dtype``, ``params.<axis>``, ``fixed.<name>``) as the spec has
    it: a range as its mapping."""
    part, _, name = key.partition(".")
    if not name:
        return getattr(spec, part)
    value = getattr(spec, part)[name]
    return value.model_dump(by_alias=True) if hasattr(value, "model_dump") else value


def _in_ett_terms(exc: SpecError, ett: Mapping[str, Any]) -> SpecError:
    """An error in a column's range (``params.l``, opatlas's name for it) named as the
    estimate-train-time file writes it: the entries of ``starts``/``steps``/``ends``/
    ``operators`` at that column's index that the message is about (all four if unclear)."""
    parts = (exc.key or "").split(".")
    columns = [str(c) for c in ett["columns_name"][:ett["first_n_column"]]]
    if len(parts) < 2 or parts[0] != "params" or parts[1] not in columns:
        return exc
    i = columns.index(parts[1])
    named = [k for k in ETT_KEYS if re.search(rf"\b{k.removesuffix('s')}\b", exc.detail)]
    fields = named or list(ETT_KEYS)
    value = ett[fields[0]][i] if len(fields) == 1 else [ett[f][i] for f in fields]
    return SpecError(f"{exc.detail} (column {parts[1]})", file=exc.file,
                     key=", ".join(f"{f}[{i}]" for f in fields), value=value)


def spec_error(exc: ValidationError, data: Mapping[str, Any], file: str,
               prefix: str = "") -> SpecError:
    """Every problem pydantic found, each with its key and value: the first as the error
    (with how many more there are), the others as continuation lines under it. pydantic
    reports one bad value once per form it may take (list, range, scalar...): a key's
    first report stands for them all. ``prefix``: where ``data`` sits in its file (a
    netlist's ``graphs.G.OP``), put before every key named."""
    firsts: dict[tuple[str, ...], Any] = {}
    for err in exc.errors():
        firsts.setdefault(_written_prefix(err, data), err)
    first, *others = firsts.values()
    error = _prefixed(_one_problem(first, data, file), prefix)
    if not others:
        return error
    lines = [error.detail + f" ({len(others)} more problem(s))"]
    for err in others:
        also = _prefixed(_one_problem(err, data, file), prefix)
        said = [f"key '{also.key}'"] if also.key is not None else []
        said += [f"value {also.value!r}"] if also.value is not None else []
        lines.append(f"  also: {', '.join(said)}: {also.detail}" if said else
                     f"  also: {also.detail}")
    return SpecError("\n".join(lines), file=file, key=error.key, value=error.value)


def _prefixed(err: SpecError, prefix: str) -> SpecError:
    if not prefix or err.key is None:
        return err
    return SpecError(err.detail, file=err.file, key=f"{prefix}.{err.key}", value=err.value)


def _written_prefix(err: Any, data: Mapping[str, Any]) -> tuple[str, ...]:
    """The keys of an error's location that the file writes, up to the first it does not
    (a name pydantic gives a form of the value): the key the problem is about."""
    keys: list[str] = []
    node: Any = data
    for part in (str(p) for p in err["loc"]):
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            break
        keys.append(part)
    return tuple(keys)


def _one_problem(err: Any, data: Mapping[str, Any], file: str) -> SpecError:
    """One of pydantic's errors as a ``SpecError`` naming the key and value the file wrote."""
    loc = [str(p) for p in err["loc"] if not str(p).startswith(("function-", "lax-"))]
    # pydantic adds union-branch names to loc; keep the path of keys the user wrote
    keys, node = [], data
    for part in loc:
        if isinstance(node, Mapping) and part in node:
            keys.append(part)
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            keys.append(part)
            node = node[int(part)]
    key = ".".join(keys) if keys else (loc[0] if loc else None)
    value = node if keys else err.get("input")
    if not loc and isinstance(value, Mapping):  # a rule over the whole file: its message
        value = None                            # says what is wrong, the file is not repeated
    msg = str(err["msg"]).removeprefix("Value error, ")
    cause = (err.get("ctx") or {}).get("error")
    if isinstance(cause, ParamError) and isinstance(node, Mapping) and cause.key in node:
        keys, node, msg = [*keys, cause.key], node[cause.key], cause.detail
        key, value = ".".join(keys), node
    if err["type"] == "missing":
        missing = loc[len(keys)] if len(loc) > len(keys) else (key or "?")
        return SpecError(f"required key '{missing}' is missing", file=file,
                         key=".".join([*keys, missing]) if keys else missing)
    return SpecError(msg, file=file, key=key, value=value)


def _from_ett(data: dict[str, Any], file: str) -> dict[str, Any]:
    """estimate-train-time kernel-sampling YAML -> opatlas spec mapping (the file is unchanged)."""
    for key in ("kernel_name", "columns_name", "first_n_column", *ETT_KEYS):
        if key not in data:
            raise SpecError(f"required key '{key}' is missing (estimate-train-time config)",
                            file=file, key=key)
    n = data["first_n_column"]
    cols = data["columns_name"]
    if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
        raise SpecError("must be a positive integer", file=file, key="first_n_column", value=n)
    if not isinstance(cols, list) or len(cols) < n:
        raise SpecError(f"must list at least first_n_column={n} names", file=file,
                        key="columns_name", value=cols)
    for key in ETT_KEYS:
        if not isinstance(data[key], list) or len(data[key]) != n:
            raise SpecError(f"must be a list of first_n_column={n} entries", file=file,
                            key=key, value=data[key])
    params: dict[str, Any] = {}
    for i, name in enumerate(cols[:n]):
        params[str(name)] = {"start": data["starts"][i], "step": data["steps"][i],
                             "end": data["ends"][i], "operator": data["operators"][i]}
    wait, warm = data.get("wait", 0), data.get("warmup", 0)
    upstream = {k: v for k, v in data.items() if k not in ETT_KEYS}
    return {
        "name": data.get("name") or str(data["kernel_name"]),
        "op": str(data["kernel_name"]),
        "params": params,
        "dtype": "fp16",
        "repeats": data.get("active", 10),
        "warmup": (wait if isinstance(wait, int) else 0) + (warm if isinstance(warm, int) else 0),
        "source": "ett",
        "upstream": upstream,
    }


# ops whose vectors only their built-in spec expands (a reshard's tensor shape is a list, the
# seed's grids are not a product of values)
BUILTIN_SWEEP_ONLY = ("reshard",)


def _refuse_builtin_only(name: Any, file: str) -> None:
    """A file's spec of an op of :data:`BUILTIN_SWEEP_ONLY` is refused, with the way to run
    part of its built-in sweep (before its values are validated: a reshard's shape, a list,
    would only get pydantic's complaint about lists)."""
    from opatlas.ops import get_op

    try:
        op, _ = get_op(str(name))
    except UnknownOpError:
        return  # said where the op is checked
    if op.name in BUILTIN_SWEEP_ONLY:
        raise SpecError(f"op '{op.name}' is swept by its built-in spec (the seed's grids, "
                        f"shapes and strategies), not a file's: select part of it with "
                        f"`opatlas run {op.name} --where \"input_core_grid == '2x2'\"` "
                        f"(`opatlas ops` lists its parameters; `opatlas sweep expand "
                        f"{op.name} --where ... --out v.json` writes its vectors)",
                        file=file, key="op", value=name)


def _check_op(spec: SweepSpec, file: str) -> None:
    from opatlas.ops import get_op  # local import: ops may pull optional modules

    try:
        op, fixed = get_op(spec.op)
    except UnknownOpError as exc:
        raise SpecError(str(exc), file=file,
                        key="kernel_name" if spec.source == "ett" else "op",
                        value=spec.op) from None
    _check_alias(spec, op, fixed, file)
    _check_fixed_known(spec, op, file)
    _check_passes(spec, op, file)
    provided = set(spec.param_names()) | set(spec.fixed) | set(fixed) | {"dtype"}
    missing = [p for p in op.params if p not in provided and p not in op.defaults]
    if missing:
        raise SpecError(f"op '{op.name}' needs parameter(s) {missing}, which the spec "
                        f"does not give", file=file, key="params", value=sorted(provided))
    _check_sizes(spec, {**op.defaults, **fixed}, file)
    _check_dtypes(spec, file)
    _check_choices(spec, op, file)
    _check_duplicates(spec, file)
    unused = sorted(set(spec.param_names()) - set(op.params) - set(op.defaults) - {"dtype"})
    if unused and not op.accepts_extra:
        import warnings

        hints = "".join(_nearest_hint(name, op) for name in unused)
        warnings.warn(f"{file}: op '{op.name}' takes no parameter {', '.join(unused)}: each "
                      f"of its values repeats the same measurement under another vector "
                      f"(it takes {', '.join([*op.params, *op.defaults])}){hints}",
                      UserWarning, stacklevel=2)


def _nearest_hint(name: str, op: Op) -> str:
    """``; did you mean 'role' for 'rol'?`` naming the parameter of ``op`` nearest ``name``
    ("" when none is near)."""
    import difflib

    near = difflib.get_close_matches(name, [*op.params, *op.defaults, "dtype"], n=1)
    return f"; did you mean '{near[0]}' for '{name}'?" if near else ""


def _check_fixed_known(spec: SweepSpec, op: Op, file: str) -> None:
    """Every ``fixed`` key is a parameter the op takes: a misspelt one (``rol: out``) would
    be stored with the vectors while the op measures its default (role qkv), another op.
    An unknown ``params`` axis is only warned of (its values at least vary the vector)."""
    if op.accepts_extra:
        return
    known = {*op.params, *op.defaults, "dtype"}
    for name, value in spec.fixed.items():
        if name not in known:
            raise SpecError(f"op '{op.name}' takes no parameter '{name}'"
                            f"{_nearest_hint(name, op)} (it takes "
                            f"{', '.join([*op.params, *op.defaults])})", file=file,
                            key=f"fixed.{name}", value=value)


def _check_passes(spec: SweepSpec, op: Op, file: str) -> None:
    """Every pass the spec asks for is one the op has: ``run`` would drop the others
    unsaid, or fail when none is left, long after ``sweep expand`` called the spec valid."""
    for value in spec.passes or ():
        if value not in op.passes:
            raise SpecError(f"op '{op.name}' has no pass '{value}'; its passes are "
                            f"{', '.join(op.passes)}", file=file, key="passes", value=value)


def _check_alias(spec: SweepSpec, op: Op, fixed: Mapping[str, Any], file: str) -> None:
    """A spec of an alias (``linear1``: linear with role qkv) gives no parameter the alias
    fixes with another value: it would measure another op (the vocab projection) and file
    it under the alias's name. The same value is allowed."""
    from opatlas.ops.registry import aliases_fixing, contradicted

    given = [(f"fixed.{name}", name, v) for name, v in spec.fixed.items()]
    given += [(f"params.{key}", name, v) for key, name, v in spec.named_values()]
    if "dtype" in spec.model_fields_set:
        given.append(("dtype", "dtype", spec.dtype))
    for key, name, value in given:
        if contradicted(fixed, {name: value}) is None:
            continue
        meant = aliases_fixing(op.name, {name: value})
        instead = f"op '{meant[0]}' ({op.name} with {name}={value}), or " if meant else ""
        raise SpecError(f"op '{spec.op}' is the alias of op '{op.name}' with {name} fixed to "
                        f"{fixed[name]!r}, so the spec cannot give another {name}: leave "
                        f"{name} out, or use {instead}op '{op.name}' with {name} as a "
                        f"parameter", file=file, key=key, value=value)


def _check_dtypes(spec: SweepSpec, file: str) -> None:
    """Every dtype the grid takes (``dtype``, ``fixed.dtype`` or a ``dtype`` parameter) is one
    the catalog can count: a typo would otherwise expand into vectors that only fail when run."""
    from opatlas.ops.base import DTYPE_BYTES

    for key, value in spec.dtypes():
        if value not in DTYPE_BYTES:
            raise SpecError(f"unknown dtype; one of {', '.join(DTYPE_BYTES)}", file=file,
                            key=key, value=value)


def _check_choices(spec: SweepSpec, op: Op, file: str) -> None:
    """A parameter the op takes from a fixed set (``Op.choices``, e.g. a linear's ``role``)
    has one of its values: a typo would otherwise expand into vectors that are all invalid,
    counted as if the grid had meant them."""
    choices: Mapping[str, Sequence[Any]] = getattr(op, "choices", None) or {}
    if not choices:
        return
    given = [(f"fixed.{name}", name, v) for name, v in spec.fixed.items()]
    given += [(f"params.{key}", name, v) for key, name, v in spec.named_values()]
    for key, name, value in given:
        allowed = choices.get(name)
        if allowed is not None and value not in allowed:
            raise SpecError(f"not a {name} op '{op.name}' takes; one of "
                            f"{', '.join(str(a) for a in allowed)}", file=file, key=key,
                            value=value)


def _check_sizes(spec: SweepSpec, defaults: Mapping[str, Any], file: str) -> None:
    """Sizes and splits (``SIZE_PARAMS``) are whole numbers >= 1: an op would truncate 128.5
    to 128 and store the same work under another vector. 0 is taken where it is the op's
    catalog ``defaults`` (``opatlas ops``: linear's ffn=0, "not given", 4·dim then)."""
    from opatlas.ops.base import SIZE_PARAMS, zero_means_not_given

    for key, name, v in spec.named_values():
        whole = isinstance(v, int | float) and not isinstance(v, bool) and \
            float(v).is_integer() and (v >= 1 or (v == 0 and zero_means_not_given(defaults, name)))
        if name in SIZE_PARAMS and not whole:
            raise SpecError("a size or split must be a whole number >= 1 (check the range's "
                            "start and step)", file=file, key=f"params.{key}", value=v)


def _check_duplicates(spec: SweepSpec, file: str) -> None:
    """A value listed twice on an axis would expand into the same vectors twice (the same id,
    counted twice by ``sweep expand`` and ``run``, stored once): refused, naming it."""
    import json

    for key, values in spec.axes():
        seen: set[str] = set()
        for value in values:
            canon = json.dumps(value, sort_keys=True, default=str)
            if canon in seen:
                raise SpecError("this value is listed more than once; list each value once",
                                file=file, key=f"params.{key}", value=value)
            seen.add(canon)
