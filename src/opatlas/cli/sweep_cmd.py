"""``opatlas sweep expand|list`` and ``opatlas ops``."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from opatlas.cli.common import OpsModuleOpt, PartOpt, PartsOpt, WhereOpt, load
from opatlas.console import counted
from opatlas.errors import OpatlasError
from opatlas.tables import PARQUET_SUFFIXES

if TYPE_CHECKING:
    from opatlas.spec import SweepSpec

app = typer.Typer(help="Expand sweep specs into op vectors.", no_args_is_help=True)
EXPORT_LOG_SECONDS = 5.0  # export-tt's log pace off a terminal


@app.command("expand")
def expand_cmd(
    spec: str = typer.Argument(..., help="Spec file (opatlas or estimate-train-time YAML) or "
                                         "built-in spec name."),
    parts: int = PartsOpt,
    part: int = PartOpt,
    out: Path | None = typer.Option(None, "--out", help="Write the valid vectors to a .json or "
                                                        ".parquet (or .pq) file."),
    as_json: bool = typer.Option(False, "--json", help="Print the counts as JSON."),
    where: str | None = WhereOpt,
    ops_module: list[str] | None = OpsModuleOpt,
) -> None:
    """Expand SPEC and print how many vectors are valid, and why the others are not.

    Examples:

        opatlas sweep expand examples/specs/linear.yml

        opatlas sweep expand examples/specs/ett_flash_atten.yml --parts 4 --part 1 --json

        opatlas sweep expand examples/specs/linear.yml --where "dim >= 1024" --out vectors.parquet
    """
    from opatlas.sweep import expand
    s = load(spec, ops_module)
    result = expand(s, parts=parts, part=part, where=where, materialize=out is not None)
    if not result.valid:  # a spec or a --where leaving none: refused, as `opatlas run` does
        _refuse_empty_selection(s, where, result.invalid, parts, "nothing to expand")
    if out is not None:
        _write_vectors(result.vectors, out)
    summary = result.summary()
    if result.uncounted:  # a total would count the valid vectors alone
        summary = {**summary, "total": None, "invalid_counted": False}
        typer.echo(f"opatlas: note: invalid points not counted: {result.uncounted}", err=True)
    if as_json:
        typer.echo(json.dumps(summary))
        return
    of_part = f" in part {part} of {parts}" if parts > 1 else ""
    total = "" if summary["total"] is None else f"{counted(summary['total'], 'vector')}, "
    typer.echo(f"{s.name} ({s.op}): {total}{summary['valid']} valid{of_part}"
               + (" (invalid points not counted)" if result.uncounted else ""))
    for reason, n in summary["invalid"].items():
        typer.echo(f"  {n:>10}  {reason}")
    if out is not None:
        typer.echo(f"wrote {counted(len(result.vectors), 'vector')} to {out}")


def _refuse_empty_selection(spec: SweepSpec, where: str | None, invalid: Counter[str],
                            parts: int, consequence: str) -> None:
    """Refuse a spec (its constraints, its op's rules) or a ``--where`` that leaves no valid
    vector, as ``opatlas run`` does. Of one part, only where the whole sweep holds none
    either: a part may be empty by chance."""
    if parts > 1:
        from opatlas.sweep import VectorStream

        whole = VectorStream(spec, where=where, materialize=False)
        if any(b.valid for b in whole):
            return
        invalid = whole.invalid
    from opatlas.cli.common import no_valid_vector

    raise no_valid_vector(spec, where, invalid, consequence)


def _write_vectors(vectors: list, out: Path) -> None:
    from opatlas.atomic import write_output

    rows = [v.as_dict() for v in vectors]
    suffix = out.suffix.lower()
    if suffix in PARQUET_SUFFIXES:
        import pandas as pd

        write_output(out, lambda tmp: pd.DataFrame(rows).to_parquet(tmp, index=False))
    elif suffix == ".json":
        write_output(out, lambda tmp: tmp.write_text(json.dumps(rows, indent=1, default=str)))
    else:
        raise OpatlasError(f"--out {out}: use a .json, .parquet or .pq file name")



@app.command("export-tt")
def export_tt_cmd(
    spec: str = typer.Argument(..., help="Spec (e.g. the built-in 'reshard')."),
    outdir: Path = typer.Argument(..., help="Folder for vectors_export/<in_grid>/*.json."),
    where: str | None = WhereOpt,
) -> None:
    """Write vectors in tt-metal's sweep layout (vectors_export/<in>/reshard-<in>-<out>.json).

    Example:

        opatlas sweep export-tt reshard vectors_export --where "input_core_grid == '2x2'"
    """
    from opatlas.run.progress import Progress
    from opatlas.sweep import expand
    from opatlas.tenstorrent.ttjson import check_reshard, export_tt

    s = load(spec, None)
    check_reshard(s.op)
    result = expand(s, where=where)
    if not result.valid:
        _refuse_empty_selection(s, where, result.invalid, 1, "nothing written")
    vectors = result.vectors
    typer.echo(f"writing {len(vectors):,} vectors under {outdir}"
               + ("" if where else " (--where picks fewer)"), err=True)
    with Progress(len(vectors), label="export-tt", log_every=1) as progress:
        paced = PacedAdvance(progress, "written")
        files = export_tt(vectors, outdir, paced)
        paced.flush()
    size = sum(f.stat().st_size for f in files)
    typer.echo(f"wrote {len(files)} files ({size / 1e6:,.1f} MB) under {outdir}")


class PacedAdvance:
    """Progress for work that ends in many quick steps (export-tt: a file each): on a
    terminal each step moves the bar; otherwise steps are gathered and passed on at most every
    ``seconds`` (each a log line), then once by :meth:`flush`, so that a log gets a line every
    few seconds and a final one, not one per file."""

    def __init__(self, progress: Any, status: str, seconds: float = EXPORT_LOG_SECONDS) -> None:
        self.progress, self.status, self.seconds = progress, status, seconds
        self.pending = 0
        self.last = time.monotonic()

    def __call__(self, count: int) -> None:
        self.pending += count
        if self.progress.interactive or time.monotonic() - self.last >= self.seconds:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            self.progress.advance(self.status, self.pending)
            self.pending = 0
        self.last = time.monotonic()


@app.command("list")
def list_cmd() -> None:
    """List the built-in specs (usable wherever a SPEC path is)."""
    from opatlas.sweep.builtin import builtin_names

    for name in builtin_names():
        typer.echo(name)


def ops(
    aliases: bool = typer.Option(False, "--aliases", help="Also list aliases, each with the "
                                                          "op it runs and what it fixes."),
    as_json: bool = typer.Option(False, "--json", help="Print the catalog as JSON."),
    ops_module: list[str] | None = OpsModuleOpt,
) -> None:
    """List the ops in the catalog with their parameters, defaults (dtype included) and passes.

    Examples:

        opatlas ops --aliases

        opatlas ops --ops-module my_ops.py --json
    """
    from opatlas.cli.common import load_ops_modules
    from opatlas.ops import list_ops

    load_ops_modules(ops_module)
    entries = [catalog_entry(name) for name in list_ops(include_aliases=aliases)]
    if as_json:
        typer.echo(json.dumps(entries, indent=1, default=str))
        return
    _print_ops(entries, aliases)


def catalog_entry(name: str) -> dict[str, Any]:
    """What ``opatlas ops`` says of ``name``: an alias's required and optional parameters are
    its op's less those it fixes (a spec cannot give them another value), which ``fixed``
    holds. ``dtype`` is among the optional ones of every op: each vector has one."""
    from opatlas.ops import get_op
    from opatlas.ops.registry import alias_of
    from opatlas.spec.model import DEFAULT_DTYPE

    op, fixed = get_op(name)
    target = alias_of(name)
    defaults = {k: v for k, v in op.defaults.items() if k not in fixed}
    if "dtype" not in fixed:
        defaults.setdefault("dtype", DEFAULT_DTYPE)
    return {"op": name, "alias_of": target[0] if target else None, "fixed": fixed,
            "params": [p for p in op.params if p not in fixed], "defaults": defaults,
            "passes": list(op.passes), "description": op.description}


def _print_ops(entries: list[dict[str, Any]], aliases: bool) -> None:
    from rich.table import Table

    from opatlas.console import print_wide

    columns = ["op", *(["alias of (fixes)"] if aliases else []), "parameters",
               "optional (default)", "passes", "what"]
    table = Table(*columns)
    for e in entries:
        fixes = ", ".join(f"{k}={v}" for k, v in e["fixed"].items())
        alias = [f"{e['alias_of']} ({fixes})" if fixes else e["alias_of"] or ""]
        table.add_row(e["op"], *(alias if aliases else []), ", ".join(e["params"]),
                      ", ".join(f"{k}={v}" for k, v in e["defaults"].items()),
                      "/".join(e["passes"]), e["description"])
    print_wide(table)
