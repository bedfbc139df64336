"""``opatlas fit`` and ``opatlas predict``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from opatlas.cli.common import OpsModuleOpt, load_ops_modules
from opatlas.errors import OpatlasError
from opatlas.tables import TABLE_SUFFIXES

if TYPE_CHECKING:
    import pandas as pd

    from opatlas.predict import Predictor


def fit(
    data: str = typer.Option("bundled", "--data", help="Store file, folder of estimate-train-"
                                                       "time CSVs (or one of them), or "
                                                       "'bundled' (A100) or 'h100'."),
    recipe: str = typer.Option("hybrid", "--recipe", help="hybrid | gbm | ett | reshard"),
    op: list[str] | None = typer.Option(None, "--op", help="Only these ops (repeatable)."),
    split: str = typer.Option("random", "--split",
                              help="random[:FRAC] | kfold:K | extrapolate:COL:FRAC | group:COL"),
    out: Path | None = typer.Option(None, "--out", help="A .csv, .csv.gz or .parquet file: "
                                                        "write the metrics. A folder (a name "
                                                        "without an extension): save the fitted "
                                                        "models. reshard: a .csv (or a name "
                                                        "without an extension) for the models."),
    device: str | None = typer.Option(None, "--device", help="Only the rows measured on this "
                                                             "device (any name of a catalog "
                                                             "device, or a name the data "
                                                             "holds); default: all (--recipe "
                                                             "reshard: a store's one device)."),
    dtype: str | None = typer.Option(None, "--dtype", help="Only the rows in this precision "
                                                           "(fp16, bf16, fp32); default: all."),
    shards: int | None = typer.Option(None, "--shards", min=1,
                                      help="reshard: split the CSV into N files (default 1)."),
    group_by: list[str] | None = typer.Option(
        None, "--group-by", help="reshard: group columns (repeatable; default in_grid, out_grid, "
                                 "group)."),
    size_col: str | None = typer.Option(None, "--size", help="reshard: the size column (x; "
                                                             "default tiles)."),
    time_col: str | None = typer.Option(None, "--time", help="reshard: the time column (y; "
                                                             "default y or duration_ns)."),
    no_baseline: bool = typer.Option(False, "--no-baseline", help="Skip the ett baseline."),
    as_json: bool = typer.Option(False, "--json", help="Print the evaluations as JSON (errors "
                                                      "as fractions: 0.0195 is the table's "
                                                      "1.95)."),
    threads: int | None = typer.Option(None, "--threads", min=1,
                                       help="Threads of each model's fit (default 2; fits "
                                            "on fewer than 1,000 rows take one). The models "
                                            "do not depend on it."),
    ops_module: list[str] | None = OpsModuleOpt,
) -> None:
    """Fit op runtime models and report held-out errors next to estimate-train-time's models.

    Examples:

        opatlas fit --op linear1 --op flash_atten

        opatlas fit --split extrapolate:dim:0.2 --json

        opatlas fit --data my.duckdb --device A100 --dtype bf16

        opatlas fit --data my.duckdb --recipe reshard --out models.csv --shards 12

        opatlas fit --data runs.csv --recipe reshard --group-by kernel --size bytes --time ns

        opatlas fit --data my.duckdb --ops-module my_ops.py   (your own ops: their defaults
        and counts)
    """
    from opatlas.fit.data import alias_rows, check_catalogued, load_op_data

    split = _check_fit_request(recipe, split)  # with its default K or fraction said
    _check_recipe_options(recipe, {"--shards": shards, "--group-by": group_by,
                                   "--size": size_col, "--time": time_col},
                          {"--op": op, "--dtype": dtype,
                           "--no-baseline": no_baseline or None,
                           "--ops-module": ops_module or None, "--threads": threads})
    load_ops_modules(ops_module)
    _check_fit_out(out, recipe)
    if recipe == "reshard":
        if shards is not None and out is None:
            raise OpatlasError(f"--shards {shards} splits the models CSV that --out writes: "
                               f"give --out models.csv (without it nothing is saved)")
        _fit_reshard(data, out, shards or 1, as_json, split, group_by or None,
                     size_col or "tiles", time_col, device)
        return
    from opatlas.fit.evaluate import evaluate_all

    frame = _only_device(load_op_data(data), data, device, dtype)
    ops = None
    if op:
        ops, said = _data_op_names(op, set(frame["op"].unique()))
        frame, found = alias_rows(frame, ops)
        for note in (*said, *found):
            typer.echo(f"opatlas: note: {note}", err=True)
    check_catalogued(frame, data, ops)
    from opatlas.fit.recipes import fit_threads_as

    with fit_threads_as(threads):
        # never empty: evaluate_all refuses a request that leaves nothing, saying why
        evs = evaluate_all(frame, recipe, split, ops=ops, baseline=not no_baseline,
                           progress=True)
        _write_fit(evs, frame, data, recipe, out, as_json, split)


def _write_fit(evs: list, frame: pd.DataFrame, data: str, recipe: str, out: Path | None,
               as_json: bool, split: str) -> None:
    """Say, write (metrics or models: ``--out``) and print what ``opatlas fit`` evaluated."""
    from opatlas.fit.evaluate import held_constant_notes

    for note in held_constant_notes(frame, evs):
        typer.echo(f"opatlas: note: {note}", err=True)
    rows = [e.as_json() for e in evs]
    if out is not None and out.name.lower().endswith(TABLE_SUFFIXES):
        import pandas as pd

        from opatlas.tables import write_table

        write_table(pd.DataFrame(rows), out, "--out")
        keys = _which(rows)
        typer.echo(f"wrote the metrics of {len(rows)} (op, pass{keys}) "
                   f"{'groups' if keys else 'pairs'} to {out}", err=as_json)
    elif out is not None:
        _save_models(frame, data, recipe, out, {(r["op"], r["pass"]) for r in rows}, as_json)
    if as_json:
        typer.echo(json.dumps(rows))
        return
    _print_fit_table(rows, split)


def _print_fit_table(rows: list[dict], split: str) -> None:
    """The held-out errors, one row per (op, pass), with a device and a dtype column where the
    rows span several (else the title names the one they share)."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    from opatlas.console import make_console, print_wide

    varying = [k for k in ("device", "dtype") if len({r[k] for r in rows}) > 1]
    shared = " ".join(str(rows[0][k]) for k in ("device", "dtype") if k not in varying)
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False,
                  title=Text(f"held-out errors (%): {rows[0]['recipe']}, split {split}"  # as typed:
                             f"{f', {shared}' if shared else ''}"))  # no markup nor emoji (:b:)
    table.add_column("op", overflow="fold", min_width=8)
    for name in (*varying, "pass", "train", "test", "MAPE", "RMSRE", "ett", "twins", "floor",
                 "ours"):
        table.add_column(name, no_wrap=True,
                         justify="left" if name in ("pass", *varying) else "right")
    for r in rows:
        table.add_row(r["op"], *(str(r[k]) for k in varying), r["pass"], str(r["n_train"]),
                      str(r["n_test"]), _pct(r["mape"]), _pct(r["rmsre"]),
                      _pct(r["baseline_mape"]), str(r["twin_n"]), _pct(r["twin_mape"]),
                      _pct(r["twin_model_mape"]))
    print_wide(table)
    make_console().print(f"{_counts_note(rows)}; r², max error: --json. ett: "
                    "estimate-train-time's models on the same split. twins: test rows whose "
                    "kernel work also appears in training; floor: the MAPE of predicting those by "
                    "their training twins' mean (the data's own noise); ours: this model on the "
                    "same rows.", style="dim")


def _which(rows: list[dict]) -> str:
    """", device, dtype" for the keys that tell the rows apart beyond (op, pass)."""
    return "".join(f", {k}" for k in ("device", "dtype") if len({r[k] for r in rows}) > 1)


def _check_recipe_options(recipe: str, reshard_only: dict, op_only: dict) -> None:
    """Refuse options the recipe would ignore: the reshard recipe's own under another recipe,
    the op models' (``--op``, ``--device``...) under reshard. ``None`` means not given."""
    given = [k for k, v in (op_only if recipe == "reshard" else reshard_only).items()
             if v is not None and v != []]
    if not given:
        return
    verb = "applies" if len(given) == 1 else "apply"
    if recipe == "reshard":
        from opatlas.fit.recipes import RECIPES

        raise OpatlasError(f"{', '.join(given)} {verb} only to the op models (--recipe "
                           f"{' | '.join(RECIPES)}); --recipe reshard fits per-group lines to "
                           f"reshard results (it takes --shards, --group-by, --size, --time)")
    raise OpatlasError(f"{', '.join(given)} {verb} only to --recipe reshard (this is --recipe "
                       f"{recipe})")


def _only_device(frame, data: str, device: str | None, dtype: str | None):
    """``frame``'s rows on ``device`` (any of its names) in ``dtype``, each when given; none
    left is refused, naming what the data holds."""
    if device is None and dtype is None:
        return frame
    import numpy as np

    from opatlas.devices import device_key
    from opatlas.fit.data import device_keys, holdings
    from opatlas.predict import check_dtype

    keep = np.ones(len(frame), dtype=bool)
    if dtype is not None:
        check_dtype(dtype, "--dtype")
        keep = keep & (frame["dtype"] == dtype).to_numpy()
    if device is not None:
        keep = keep & (device_keys(frame) == device_key(device)).to_numpy()
    if not keep.any():
        asked = " ".join(f"--{k} {v}" for k, v in (("device", device), ("dtype", dtype)) if v)
        raise OpatlasError(f"{asked}: the op data {data} has no such rows; it holds: "
                           f"{holdings(frame)}")
    return frame[keep].reset_index(drop=True)


def _data_op_names(names: list[str], have: set[str]) -> tuple[list[str], list[str]]:
    """Each ``--op`` as the data names it, taken as ``opatlas predict`` takes it: a name the
    data holds stays; another name of the same catalog op takes the data's (flash_attention:
    flash_atten, and back); ``linear`` with no role is its default role's linear (linear1,
    role qkv) in data that files linears by role. A name fixing parameters of an op the data
    holds (linear1 of a store's linear rows) stays for :func:`alias_rows`. A note says each
    name mapped."""
    from opatlas.ops.registry import filed_as
    from opatlas.predict.predictor import ETT_NAMES, LINEAR_ROLES, default_linear_role

    out, notes = [], []
    for name in names:
        found = name
        if name in have:
            pass
        elif name == "linear":  # its role defaults to qkv: linear3 (ffn_up) is another op
            if LINEAR_ROLES[role := default_linear_role()] in have:
                found = LINEAR_ROLES[role]
                notes.append(f"--op linear: no role given; fitting its default role {role} "
                             f"(the data's {found!r}; --op "
                             f"{', '.join(v for v in LINEAR_ROLES.values() if v != found)} "
                             f"are the other roles)")
        elif ETT_NAMES.get(name) in have:
            found = ETT_NAMES[name]
        elif len(same := [s for s, values in filed_as(name, sorted(have)) if not values]) == 1:
            found = same[0]
        if found != name and name != "linear":
            notes.append(f"--op {name}: the data files it as {found!r}")
        out.append(found)
    return list(dict.fromkeys(out)), notes


def _counts_note(rows: list[dict]) -> str:
    """What train and test count: with several folds, a mean per fold and all folds' rows."""
    folds = sorted({r["n_folds"] for r in rows})
    if folds == [1]:
        return "train, test: the rows fitted on and held out"
    each = f"{folds[0]}" if len(folds) == 1 else f"{folds[0]} to {folds[-1]}"
    return (f"{each} folds: train is the mean rows fitted on per fold, test the held-out rows "
            f"of all folds together, each row tested once")


def _check_fit_request(recipe: str, split: str) -> str:
    """``--recipe`` and the form of ``--split``, refused before any data is read; the split
    as the table's title and the JSON name it (:func:`opatlas.fit.splits.split_label`)."""
    from opatlas.fit.recipes import RECIPES
    from opatlas.fit.splits import check_split, split_label

    if recipe not in (*RECIPES, "reshard"):
        raise OpatlasError(f"--recipe {recipe!r}: unknown recipe; one of "
                           f"{', '.join((*RECIPES, 'reshard'))}")
    check_split(split)
    return split_label(split)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.2f}"


def _check_fit_out(out: Path | None, recipe: str) -> None:
    """``--out`` as its help says, refused before any fitting: a table of metrics (.csv,
    .csv.gz, .parquet; reshard: a .csv of models) or a folder, never a folder named mm.json."""
    if out is None:
        return
    if recipe == "reshard":
        ok = out.name.lower().endswith(".csv") or not out.suffix
        kinds = ".csv file for the models (or a name without an extension)"
    else:
        ok = out.name.lower().endswith(TABLE_SUFFIXES) or out.is_dir() or \
            (not out.suffix and not out.exists())
        kinds = (f"{', '.join(TABLE_SUFFIXES)} file for the metrics, or a folder (a name "
                 f"without an extension) for the models")
    if ok:
        return
    what = f"unknown extension {out.suffix!r}" if out.suffix else "is a file, not a folder"
    raise OpatlasError(f"--out {out}: {what}; fit --recipe {recipe} writes a {kinds}")


def _save_models(frame, data: str, recipe: str, out: Path, keys: set, quiet: bool) -> None:
    """Fit on all rows and save each model in ``out`` (a model registry folder), with progress
    on stderr; ``opatlas predict --models`` and ``analyze --models`` read them."""
    from opatlas.errors import TooFewRows
    from opatlas.fit.recipes import MIN_FIT_ROWS
    from opatlas.predict import Predictor
    from opatlas.run.progress import Progress

    pred = Predictor(recipe=recipe, data=data, cache_dir=out)
    pred._data = frame
    todo = [(device, dtype, op, pass_) for device, dtype, op, pass_
            in frame[["device", "dtype", "op", "pass"]].drop_duplicates().itertuples(index=False)
            if (op, pass_) in keys]
    thin = []
    with Progress(len(todo), label=f"saving {recipe} models", unit="models",
                  log_every=max(1, len(todo) // 10)) as bar:
        for device, dtype, op, pass_ in todo:
            try:
                pred.model(op, pass_, device, dtype)
                bar.advance("ok", detail=f"{op} {pass_}")
            except TooFewRows:  # another device or dtype of an evaluated op, too thin to fit
                thin.append(f"{op} {pass_} ({device} {dtype})")
                bar.advance("skipped", detail=f"{op} {pass_}")
    if thin:
        typer.echo(f"opatlas: note: not saved, fewer than {MIN_FIT_ROWS} rows to fit on: "
                   f"{', '.join(thin)}", err=True)
    typer.echo(f"saved {len(todo) - len(thin)} models under {out} (opatlas predict --models "
               f"{out} uses them)", err=quiet)


def _fit_reshard(data: str, out: Path | None, shards: int, as_json: bool, split: str,
                 group_by: list[str] | None, size_col: str, time_col: str | None,
                 device: str | None = None) -> None:
    """Per-group linear models (the seed's fit_models.py) with in-sample and held-out metrics."""
    from opatlas.fit.linear import RESHARD_GROUPS, fit_linear_groups, heldout_linear_groups, write_models_csv

    if data == "bundled":
        raise OpatlasError("--recipe reshard needs --data STORE|CSV of reshard results (opatlas "
                           "run of the reshard op, or a CSV of them); the default --data "
                           "bundled is the A100 op data, which holds none")
    path = Path(data)
    df = _reshard_data(path, device)
    groups = list(group_by or RESHARD_GROUPS)
    ycol = time_col or ("y" if "y" in df else "duration_ns")
    missing = [c for c in (*groups, size_col, ycol) if c not in df.columns]
    if missing:
        raise OpatlasError(f"--recipe reshard: {path} has no column(s) {missing}; it has "
                           f"{sorted(df.columns)[:16]} (set --group-by, --size, --time)")
    if df.empty:
        raise OpatlasError(f"--recipe reshard: {path} has no rows to fit")
    models = fit_linear_groups(df, groups, size_col, ycol)
    held = heldout_linear_groups(df, groups, size_col, ycol, split)
    both = models.merge(held, on=groups, how="left")
    if out is not None:
        if shards > len(models):
            typer.echo(f"opatlas: note: --shards {shards}: {shards - len(models)} of the files "
                       f"hold no model (the header alone): {len(models)} models to split",
                       err=True)
        # the files written; beside --json on stderr, so stdout holds the JSON alone
        for p in write_models_csv(models, out, shards, groups):
            typer.echo(str(p), err=as_json)
        heldout_csv = out.with_name(f"{out.stem if out.suffix == '.csv' else out.name}.heldout.csv")
        from opatlas.tables import write_table

        write_table(both, heldout_csv, "--out")
        typer.echo(str(heldout_csv), err=as_json)
    if as_json:
        typer.echo(both.to_json(orient="records"))
        return
    _print_reshard_models(both, groups, size_col, ycol)
    if out is None:
        typer.echo(f"opatlas: note: the {len(models)} models are not saved: give --out "
                   f"models.csv to write them (--json prints them all)", err=True)
    typer.echo(f"{len(models)} models; in-sample median r² {models['r^2'].median():.4f}, "
               f"RMSRE {models['RMSRE'].median():.4f}; held-out ({split}, "
               f"{int((held['heldout_points'] > 0).sum())} groups with ≥ 3 sizes) median r² "
               f"{_median(held['heldout_r^2'], 'no group holds out 2 sizes')}, RMSRE "
               f"{_median(held['heldout_RMSRE'], 'no group holds out a size')}")


def _reshard_data(path: Path, device: str | None = None):
    """The fitting frame of a CSV, or of a store's ok reshard results of one device (a card,
    the simulator with one params file: ``--device`` picks it where the store holds several):
    a store without any is refused, naming the ops it holds (a CSV's missing columns are named
    by the caller)."""
    import pandas as pd

    if path.is_dir():  # estimate-train-time's folders hold op samples, not reshards
        raise OpatlasError(f"--recipe reshard: --data {path} is a folder; it takes a store or "
                           f"a CSV of reshard results")
    if path.suffix == ".csv":
        if device is not None:
            raise OpatlasError(f"--device {device}: --recipe reshard picks a device of a store's "
                               f"results; {path} is a CSV (keep only that device's rows in it)")
        return pd.read_csv(path)
    from opatlas.store import Store
    from opatlas.tenstorrent.fit import reshard_frame_from_store

    with Store(path, read_only=True) as st:
        df = reshard_frame_from_store(st)
        ops = st.ops()
    if df.empty:
        raise OpatlasError(f"--recipe reshard: the store {path} holds no ok reshard results "
                           f"(it holds ops: {', '.join(ops) or 'none'}); the reshard recipe "
                           f"fits the 'reshard' op's results")
    return _one_device(df, path, device).drop(columns="device")


def _one_device(df, path: Path, device: str | None):
    """The rows of ``device``, or of the store's only device: reshards of two devices (two
    cards, the simulator under two params files) are never pooled into one line."""
    held = sorted(df["device"].unique())
    if device is None:
        if len(held) > 1:
            raise OpatlasError(f"--recipe reshard: the store {path} holds reshards of "
                               f"{len(held)} devices ({', '.join(held)}); pick one with "
                               f"--device")
        return df
    if device not in held:
        raise OpatlasError(f"--device {device}: the store {path} holds reshards of "
                           f"{', '.join(held)} only")
    return df[df["device"] == device]


RESHARD_TABLE_ROWS = 40  # models shown; --json and --out give them all


def _print_reshard_models(both, groups: list[str], size_col: str, ycol: str) -> None:
    """The fitted lines, one row per group (the first ``RESHARD_TABLE_ROWS``), with their
    in-sample and held-out errors; an undefined value (no held-out size) shows as -."""
    import math

    from rich import box
    from rich.table import Table

    from opatlas.console import make_console, print_wide

    def num(v: float, fmt: str) -> str:
        return "-" if v is None or math.isnan(v) else format(v, fmt)

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False,
                  title=f"reshard models: {ycol} = coef · {size_col} + intercept")
    columns = ("coef", "intercept", "r²", "RMSRE", "held-out r²", "held-out RMSRE", "points")
    for name in (*groups, *columns):
        table.add_column(name, no_wrap=True, justify="left" if name in groups else "right")
    for r in both.head(RESHARD_TABLE_ROWS).to_dict("records"):
        table.add_row(*(str(r[g]) for g in groups), num(r["coef"], ".6g"),
                      num(r["intercept"], ".1f"), num(r["r^2"], ".4f"), num(r["RMSRE"], ".4f"),
                      num(r.get("heldout_r^2"), ".4f"), num(r.get("heldout_RMSRE"), ".4f"),
                      str(r["num_points"]))
    print_wide(table)
    if len(both) > RESHARD_TABLE_ROWS:
        make_console().print(f"… and {len(both) - RESHARD_TABLE_ROWS} more models: --json or "
                             f"--out for all", style="dim")


def _median(values, why_none: str) -> str:
    """The median of the defined values, or n/a and why (r² needs two held-out points)."""
    defined = values.dropna()
    return f"{defined.median():.4f}" if len(defined) else f"n/a ({why_none})"


def predict(
    op: str = typer.Argument(..., help="Op name (catalog or estimate-train-time name)."),
    shape: list[str] = typer.Option(..., "--shape", help="k=v, repeatable or comma-separated: "
                                                     "--shape mp=2 --shape b=4, or --shape "
                                                     "mp=2,b=4. A parameter with a catalog "
                                                     "default (opatlas ops) may be left out: "
                                                     "the defaults used are said."),
    device: str | None = typer.Option(None, "--device",
                                      help="The device whose samples the model is fitted on "
                                           "(any name of a catalog device, or a name the data "
                                           "holds; default NVIDIAA100-SXM4-80GB, or the one "
                                           "device the data holds)."),
    dtype: str | None = typer.Option(None, "--dtype", help="fp16, bf16 or fp32: the samples' "
                                                           "precision (default fp16, or the "
                                                           "one the data holds)."),
    recipe: str | None = typer.Option(None, "--recipe", help="hybrid | gbm | ett: the model "
                                                             "fitted (as for opatlas fit; "
                                                             "default hybrid, with --models "
                                                             "the first of them saved)."),
    data: str | None = typer.Option(None, "--data", help="Samples: 'bundled' (A100, the "
                                                         "default), 'h100', a results store, a folder "
                                                         "of estimate-train-time CSVs or one "
                                                         "of them ({GPU}_{op}_{precision}"
                                                         ".csv)."),
    models: Path | None = typer.Option(None, "--models", help="Predict with the models "
                                                              "'opatlas fit --out DIR' saved in "
                                                              "DIR (no data is read)."),
    as_json: bool = typer.Option(False, "--json", help="Print the prediction as JSON."),
    strict: bool = typer.Option(False, "--strict", help="Refuse a shape naming a value (a "
                                                        "linear's role ...) never measured, "
                                                        "or one outside the measured range."),
    ops_module: list[str] | None = OpsModuleOpt,
) -> None:
    """Predict an op's forward and backward time at one shape (models fitted on first use).

    Examples:

        opatlas predict linear1 --shape mp=2 --shape b=4 --shape l=4096 --shape dim=4096

        opatlas predict baddbmm --shape mp=8,b=2,h=64,l=2048,dim=8192

        opatlas predict linear1 --models models --shape mp=1,b=4,l=2048,dim=4096
        (models: saved by opatlas fit --out models)

        opatlas predict scale --data my.duckdb --ops-module my_ops.py --shape n=4096
        (your own op: its defaults and counts come from its module)
    """
    from opatlas.fit.recipes import RECIPES
    from opatlas.predict import Predictor, check_valid, parse_shape
    from opatlas.predict.predictor import default_linear_role

    if recipe is not None and recipe not in RECIPES:
        raise OpatlasError(f"--recipe {recipe!r}: one of {', '.join(RECIPES)}")
    if data is not None and models is not None:
        raise OpatlasError(f"--data {data} and --models {models}: give one (the saved models "
                           f"were fitted on their own data)")
    load_ops_modules(ops_module, strict=strict)
    params = parse_shape(op, shape)
    defaults: dict = {}
    if op == "linear" and "role" not in params:
        params["role"] = defaults["role"] = default_linear_role()
        typer.echo(f"opatlas: note: linear: no role given; using its default role="
                   f"{params['role']} (opatlas ops; --shape role=... picks another)", err=True)
    pred = Predictor(device=device or "NVIDIAA100-SXM4-80GB", dtype=dtype or "fp16",
                     recipe=recipe if models else recipe or "hybrid", data=data or "bundled",
                     strict=strict, models=models)
    if note := pred.take_only_holding(device, dtype):
        typer.echo(f"opatlas: note: {note}", err=True)
    device, dtype = pred.device, pred.dtype
    pred.check_device()
    # once, outside the passes: a bad linear role is an error of its own, not "no data"
    name, columns = pred.resolve_op(op, {k: [v] for k, v in params.items()})
    _say_reference(pred, op, name, columns, strict)
    passes = _measured_passes(pred, name)
    if not passes:
        raise OpatlasError(f"no model for op {op!r} on {device} {dtype}; known ops: "
                           f"{', '.join(pred.ops())}")
    passes = _fittable(pred, name, passes)
    filled = {k: v for p in passes for k, v in pred.shape_defaults(name, list(columns), p).items()}
    if filled:
        params.update(filled)
        defaults.update(filled)
        typer.echo(f"opatlas: note: {op}: using the catalog's default(s) "
                   f"{', '.join(f'{k}={v}' for k, v in filled.items())} (opatlas ops; "
                   f"--shape k=v sets another)", err=True)
    row = {**{k: v[0] for k, v in columns.items()}, **filled}
    for pass_ in passes:
        pred.check_shape(name, list(row), pass_, unknown_ok=False)
        check_valid(name, row)
    # a default filled in is range-checked only where it changes the op's counts here
    pred.check_range(name, row, passes, given=[k for k in row if k not in filled])
    _fit_with_progress(pred, name, passes)  # after the shape's checks: a bad one costs no fit
    times = pred.predict_passes(op, [params], passes)  # a floor: one line naming every pass
    out = {pass_: float(t[0]) for pass_, t in times.items()}
    if as_json:  # the floor and range notes too: said on stderr, which JSON readers skip
        typer.echo(json.dumps({"op": op, "shape": params, "defaults": defaults,
                               "device": device, "dtype": dtype, "us": out,
                               "notes": pred.notes}))
    else:
        for k, v in out.items():
            typer.echo(f"{op} {k}: {v:,.1f} µs")


def _say_reference(pred: Predictor, op: str, name: str, columns: dict, strict: bool) -> None:
    """An alias naming another implementation (upstream's fused
    ``ScaledUpperTriangMaskedSoftmax``) predicted from measurements of opatlas's own
    (``masked_softmax``, unfused): said on stderr, an error under --strict."""
    from opatlas.predict.predictor import catalog_name

    if op == catalog_name(op) or not (note := pred.reference_note(op, columns)):
        return
    said = f"{op} is predicted from {pred.data_source}'s measurements of opatlas's {name}, which {note}"
    if strict:
        raise OpatlasError(f"--strict: {said}")
    typer.echo(f"opatlas: warning: {said}", err=True)


def _measured_passes(pred: Predictor, name: str) -> list[str]:
    """The passes (fwd, bwd, step) the data holds ``name`` at: a model for each."""
    return [p for p in ("fwd", "bwd", "step") if pred.has_data(name, p)]


def _fit_with_progress(pred: Predictor, name: str, passes: list[str]) -> None:
    """The models of ``passes`` not cached yet, fitted with progress on stderr (a bar on a
    terminal, else a line before and one after each); a pass with too few rows to fit on is
    refused here, naming its count."""
    from opatlas.run.progress import Progress

    todo = [p for p in passes if pred.cached_model(name, p) is None]
    if not todo:
        return
    typer.echo(f"opatlas: note: fitting {name}'s {', '.join(todo)} model(s) on first use "
               f"(cached for the next predictions)", err=True)
    with Progress(len(todo), label=f"fitting {name}", unit="models", log_every=1) as bar:
        for pass_ in todo:
            pred.model(name, pass_)
            bar.advance("fitted", detail=pass_)


def _fittable(pred: Predictor, name: str, passes: list[str]) -> list[str]:
    """``passes`` without those too thin to fit a model on (said on stderr); the refusal of
    the first when none is left."""
    from opatlas.errors import TooFewRows

    kept, thin = [], []
    for pass_ in passes:
        try:
            pred.check_rows(name, pass_)
            kept.append(pass_)
        except TooFewRows as exc:
            thin.append(exc)
    if not kept and thin:
        raise thin[0]
    for exc in thin:
        typer.echo(f"opatlas: note: {exc}; that pass is left out", err=True)
    return kept
