"""Options shared by several verbs."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from collections import Counter

    from opatlas.errors import OpatlasError
    from opatlas.spec import SweepSpec


OpsModuleOpt = typer.Option(
    None, "--ops-module", help="Import your own ops from this .py file or module first.")
WhereOpt = typer.Option(
    None, "--where", help="Boolean expression over vector parameters selecting a subset, "
                          "e.g. \"dim >= 4096 and mp == 2\".")
PartsOpt = typer.Option(1, "--parts", help="Split the grid round-robin into N parts.", min=1)
PartOpt = typer.Option(1, "--part", help="Which part (1-based) to take.", min=1)
StoreOpt = typer.Option(Path("opatlas.duckdb"), "--store", help="Results store (DuckDB file).")


def options_given(ctx: typer.Context, names: Iterable[str]) -> list[str]:
    """The options among ``names`` (parameter names) that the user set, as ``--name``.
    Sources are compared by name: typer ships its own copy of click's ParameterSource."""
    sources = {n: ctx.get_parameter_source(n) for n in names}
    return [f"--{n.replace('_', '-')}" for n, src in sources.items()
            if src is not None and src.name not in ("DEFAULT", "DEFAULT_MAP")]


def load_ops_modules(ops_modules: list[str] | None, strict: bool = False) -> None:
    """Register the ops of each ``--ops-module`` before any spec or data is read: a user op's
    parameters, defaults and FLOPs come from its module. One that registers nothing is said
    (an error under ``strict``): the ops the user meant to add are not there."""
    from opatlas.errors import OpatlasError
    from opatlas.ops import load_ops_module

    for m in ops_modules or []:
        if load_ops_module(m):
            continue
        why = (f"--ops-module {m}: registers no op (no class decorated with @register_op, no "
               f"register_alias call)")
        if strict:
            raise OpatlasError(f"{why}; --strict")
        typer.echo(f"opatlas: warning: {why}", err=True)


def load(spec: str, ops_modules: list[str] | None) -> SweepSpec:
    from opatlas.spec import resolve_spec

    load_ops_modules(ops_modules)
    return resolve_spec(spec)


def checked_plot(value: Path | None) -> Path | None:
    """``--plot`` callback: a bad figure path is a usage error before any work is done."""
    if value is None:
        return None
    from opatlas.errors import OpatlasError
    from opatlas.figures import check_plot_path

    try:
        return check_plot_path(value)
    except OpatlasError as exc:
        raise typer.BadParameter(str(exc).removeprefix(f"--plot {value}: ")) from None


def checked_table(param: typer.CallbackParam, value: Path | None) -> Path | None:
    """``--csv`` / ``--out`` table callback: a folder or a suffix other than .csv, .csv.gz or
    .parquet is a usage error before any work is done."""
    if value is None:
        return None
    from opatlas.errors import OpatlasError
    from opatlas.tables import check_table_path

    option = param.opts[0] if param.opts else "--out"
    try:
        return check_table_path(value, option)
    except OpatlasError as exc:
        raise typer.BadParameter(str(exc).removeprefix(f"{option} {value}: ")) from None


def one_to_stdout(outputs: dict[str, bool]) -> None:
    """At most one output on standard output: two would run together into one stream that
    no reader can split (CSV then JSON). ``outputs``: each output as the user wrote it
    (``--csv -``, ``--json``) -> whether it writes there."""
    from opatlas.errors import OpatlasError

    there = [label for label, used in outputs.items() if used]
    if len(there) > 1:
        raise OpatlasError(f"{', '.join(there[:-1])} and {there[-1]} all write to standard "
                           f"output, where they would run together: send one there, the "
                           f"others to files")


def no_valid_vector(spec: SweepSpec, where: str | None, invalid: Counter[str],
                    consequence: str) -> OpatlasError:
    """The refusal of a ``--where`` (or a spec) that leaves no valid vector, with the three
    commonest reasons of ``invalid`` and what then does not happen."""
    from opatlas.errors import OpatlasError

    rejected = "; ".join(f"{n:,} {why}" for why, n in invalid.most_common(3))
    what = f"--where {where!r} selects" if where else "the spec has"
    unheld = "".join(f"; {t}" for t in unheld_values(spec, where)) if where else ""
    return OpatlasError(f"{what} no valid vector of {spec.name}"
                        + (f" (invalid: {rejected})" if rejected else "") + unheld
                        + f"; {consequence}")


def unheld_values(spec: SweepSpec, where: str) -> list[str]:
    """What a ``--where`` compares a parameter to (``name == value``, ``name in [...]``) that
    the sweep never gives it, with the values it does (a typo, ``'9x9'`` or ``'BLOKC'``, and
    an empty selection otherwise look alike)."""
    import ast

    held = {k: list(v) for k, v in spec.axes() if not any(isinstance(x, dict) for x in v)}
    held.update({k: [v] for k, v in spec.fixed.items()})
    try:
        tree = ast.parse(where, mode="eval")
    except SyntaxError:
        return []
    out = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Compare) and len(node.ops) == 1
                and isinstance(node.ops[0], ast.Eq | ast.In)):
            continue
        name, other = (node.left, node.comparators[0])
        if not isinstance(name, ast.Name):
            name, other = other, name
        if not isinstance(name, ast.Name) or name.id not in held:
            continue
        wanted = other.elts if isinstance(other, ast.List | ast.Tuple | ast.Set) else [other]
        values = held[name.id]
        for w in wanted:
            if isinstance(w, ast.Constant) and w.value not in values:
                shown = ", ".join(map(str, values[:12])) + (f" … ({len(values)} values)"
                                                            if len(values) > 12 else "")
                out.append(f"{name.id} is never {w.value!r} (its values: {shown})")
    return out
