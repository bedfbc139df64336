"""Held-out evaluation of op models, side by side with the estimate-train-time baseline and
with the data's own noise floor.

The noise floor ("twins"): a test row whose kernel work (the catalog's effective shape) also
appears among the training rows is predicted by the mean of those training twins. That oracle
knows the exact kernel, so its error is measurement noise: the test row's own and its twins'
(with one twin both add up, so the row's own noise lies between floor/√2 and the floor). A
model near or below the floor on the same rows has little left to learn from this data.
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from opatlas.columns import distinct_rows
from opatlas.devices import Device
from opatlas.errors import OpatlasError, TooFewRows
from opatlas.fit.data import data_device, shapes_of
from opatlas.fit.features import op_features
from opatlas.fit.metrics import all_metrics, mape
from opatlas.fit.recipes import MIN_FIT_ROWS, make_model
from opatlas.fit.splits import in_canonical_order, iter_splits


@dataclass
class Evaluation:
    """Held-out metrics of one (op, pass). With several folds (``kfold``, ``group``),
    ``n_train`` is the mean training rows per fold (rounded) and ``n_test`` the held-out rows
    of all folds together (each row is tested once): the metrics are over those rows."""

    op: str
    pass_: str
    recipe: str
    split: str
    n_train: int
    n_test: int
    mape: float
    rmsre: float
    r2: float
    max_error: float
    baseline_mape: float | None = None
    baseline_rmsre: float | None = None
    twin_n: int = 0
    twin_mape: float | None = None
    twin_model_mape: float | None = None
    n_folds: int = 1
    device: str = ""
    dtype: str = ""

    def as_json(self) -> dict:
        d = asdict(self)
        d["pass"] = d.pop("pass_")
        return d


def work_keys(op: str, pass_: str, shapes: pd.DataFrame, device: Device, dtype: str
              ) -> np.ndarray:
    """One code per row; equal codes = the same kernel work (the catalog's effective shape,
    or the raw shape for ops outside the catalog)."""
    X = op_features(op, pass_, shapes, device, dtype)
    effective = [c for c in X.columns if c.startswith("f_")]
    return distinct_rows(X[effective] if effective else shapes)[1]


def twin_predictions(keys: np.ndarray, y: np.ndarray, train: np.ndarray, test: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray]:
    """(positions in ``test`` with a training twin, the twins' mean time for each)."""
    means = pd.Series(y[train]).groupby(keys[train]).mean()
    found = pd.Series(keys[test]).map(means).to_numpy()
    has = np.flatnonzero(np.isfinite(found))
    return has, found[has]


def _cv(recipe: str, op: str, pass_: str, device: Device, dtype: str, shapes: pd.DataFrame,
        y: np.ndarray, folds: list[tuple[np.ndarray, np.ndarray]],
        keys: np.ndarray | None = None) -> tuple[dict, dict, str, dict]:
    """Held-out metrics over the (train, test) ``folds``, the row counts (:func:`_counts`), the
    recipe used; with ``keys`` (:func:`work_keys`) also the twin floor and this model's error
    on the same rows."""
    truth, pred, twin, twin_model, twin_truth = [], [], [], [], []
    train_sizes, used = [], recipe
    for train, test in folds:
        m = make_model(recipe, op, pass_, device, dtype).fit(shapes.iloc[train], y[train])
        used = m.recipe
        p = m.predict(shapes.iloc[test])
        truth.append(y[test])
        pred.append(p)
        if keys is not None:
            has, mean = twin_predictions(keys, y, train, test)
            twin.append(mean)
            twin_model.append(p[has])
            twin_truth.append(y[test][has])
        train_sizes.append(len(train))
    t, p = np.concatenate(truth), np.concatenate(pred)
    tt = np.concatenate(twin_truth) if twin_truth else np.zeros(0)
    floor = {"twin_n": len(tt)}
    if len(tt):
        floor.update(twin_mape=mape(tt, np.concatenate(twin)),
                     twin_model_mape=mape(tt, np.concatenate(twin_model)))
    return all_metrics(t, p), _counts(train_sizes, len(t)), used, floor


def _counts(train_sizes: list[int], n_test: int) -> dict[str, int]:
    """``n_train``: the mean training rows per fold (one fold's count would sit beside all
    folds' test rows); ``n_test``: the held-out rows of all folds; ``n_folds``."""
    return {"n_train": round(float(np.mean(train_sizes))), "n_test": n_test,
            "n_folds": len(train_sizes)}


def _folds(label: str, shapes: pd.DataFrame, split: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """The split's folds, each training on at least ``MIN_FIT_ROWS`` rows (as ``predict``
    needs to fit a model), else :class:`TooFewRows` naming the group (``label``: op/pass)
    and counts."""
    try:
        folds = list(iter_splits(shapes, split))
    except OpatlasError as exc:  # this group's values (too few distinct ones, K > rows)
        raise TooFewRows(f"{label}: {str(exc).removeprefix(f'split {split!r}: ')}") from None
    least = min((len(train) for train, _ in folds), default=0)
    if least < MIN_FIT_ROWS:
        raise TooFewRows(f"{label}: trains on {least} of its {len(shapes)} rows")
    return folds


def group_label(op: str, pass_: str, device: str, dtype: str, several: bool) -> str:
    """``op/pass``, and the device and dtype when the data holds ``several`` (else notes on
    an op's fp32 and bf16 groups read the same)."""
    return f"{op}/{pass_}" + (f" ({device} {dtype})" if several else "")


def evaluate_group(df: pd.DataFrame, recipe: str, split: str, baseline: bool = True,
                   device: Device | None = None, label: str | None = None) -> Evaluation:
    """``df``: rows of one (op, pass, device, dtype) from :func:`load_op_data`; ``device``:
    its catalog entry (default: looked up, or derived from ``df`` when the catalog lacks it).
    A split leaving a fold fewer than ``MIN_FIT_ROWS`` rows to fit on raises
    :class:`TooFewRows`, naming the group as ``label`` (default op/pass)."""
    op, pass_, name, dtype = (df[c].iloc[0] for c in ("op", "pass", "device", "dtype"))
    shapes, y = in_canonical_order(shapes_of(df), df["y_us"].to_numpy(float))
    folds = _folds(label or f"{op}/{pass_}", shapes, split)
    device = device or data_device(df, name, dtype)
    keys = work_keys(op, pass_, shapes, device, dtype)
    metrics, counts, used, floor = _cv(recipe, op, pass_, device, dtype, shapes, y, folds,
                                       keys)
    ev = Evaluation(op, pass_, used, split, **counts, **metrics, **floor, device=str(name),
                    dtype=str(dtype))
    if baseline and recipe != "ett":
        base, *_ = _cv("ett", op, pass_, device, dtype, shapes, y, folds)
        ev.baseline_mape, ev.baseline_rmsre = base["mape"], base["rmsre"]
    return ev


def held_constant(data: pd.DataFrame, evs: list[Evaluation]) -> dict[str, dict[str, tuple]]:
    """Per evaluated op, the parameters its data never varied, in every one of its model
    groups: ``{param: (values, given)}``, ``given`` False for a catalog parameter the rows
    leave out (held at its default, shown where changing it changes the op's counts). The
    models cannot have learned how they change the time."""
    done = {(e.op, e.pass_, e.device, e.dtype) for e in evs}
    out: dict[str, dict[str, tuple]] = {}
    for key, g in data.groupby(["op", "pass", "device", "dtype"], sort=True):
        if tuple(map(str, key)) not in done:
            continue
        op, found = str(key[0]), _constant_params(str(key[0]), shapes_of(g), str(key[3]))
        have = out.setdefault(op, {k: ((), v[1]) for k, v in found.items()})
        out[op] = {k: (tuple(dict.fromkeys((*vals, found[k][0]))), given)
                   for k, (vals, given) in have.items() if k in found}
    return {op: params for op, params in out.items() if params}


def held_constant_notes(data: pd.DataFrame, evs: list[Evaluation]) -> list[str]:
    """One line per op of :func:`held_constant`, for stderr."""
    notes = []
    for op, params in held_constant(data, evs).items():
        said = [f"{k} ({' or '.join(map(_value, vals))} in all rows)" if given else
                f"{k} (left out: the catalog's default {_value(vals[0])})"
                for k, (vals, given) in params.items()]
        how = "how it changes" if len(said) == 1 else "how they change"
        notes.append(f"{op}: its data never varies {', '.join(said)}: the model cannot have "
                     f"learned {how} the time; a prediction at another value follows the "
                     f"features alone")
    return notes


def _constant_params(op: str, shapes: pd.DataFrame, dtype: str) -> dict[str, tuple]:
    """``{param: (value, given)}`` of one model group's rows: the columns holding one value,
    and the catalog parameters they leave out whose value would change the op's counts."""
    out = {str(c): (shapes[c].iloc[0], True) for c in shapes if _distinct(shapes[c]) == 1}
    for name, default in _left_out_that_count(op, shapes, dtype).items():
        out[name] = (default, False)
    return out


def _distinct(col: pd.Series) -> int:
    try:
        return col.nunique(dropna=False)
    except TypeError:  # lists: unhashable
        return col.astype(str).nunique(dropna=False)


def _left_out_that_count(op: str, shapes: pd.DataFrame, dtype: str) -> dict[str, object]:
    """The catalog's numeric optional parameters of ``op`` that ``shapes`` leave out (so each
    row holds its default) and that change the counts of the first row when set to another
    value (``vocab`` counts in a vocab projection, not in the qkv one); none for an op outside
    the catalog or without counts."""
    from opatlas.ops.registry import get_op

    try:
        cat, fixed = get_op(op)
    except OpatlasError:
        return {}
    row = shapes.iloc[:1].reset_index(drop=True)
    base = _counts_of(op, row, dtype)
    if base is None:
        return {}
    out = {}
    for name, default in cat.defaults.items():
        if name in shapes or name in fixed or name == "dtype" or isinstance(default, bool) \
                or not isinstance(default, int | float):
            continue
        alts = (2 * default, default + 1) if default else (1, 2, 3, 64)
        if any(c is not None and c != base
               for c in (_counts_of(op, row.assign(**{name: a}), dtype) for a in alts)):
            out[name] = default
    return out


def _counts_of(op: str, row: pd.DataFrame, dtype: str) -> dict[str, tuple] | None:
    """The op's counts of a one-row shape, comparable with ``==``; None where it has none."""
    from opatlas.ops.batch import count_columns

    try:
        counts = count_columns(op, row, dtype=dtype)
    except (KeyError, TypeError, ValueError, ZeroDivisionError, OpatlasError):
        return None
    return {k: tuple("nan" if x != x else round(x, 9)  # NaN: equal to itself here
                     for x in np.asarray(v, dtype=float).ravel().tolist())
            for k, v in counts.items()}


def _value(v: object) -> str:
    """50257.0 as 50257: a CSV's numbers are floats."""
    return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)


def split_columns(split: str) -> list[str]:
    """The columns a split needs each op to have: ``extrapolate:COL:F``'s, ``group:A,B``'s."""
    kind, _, rest = split.partition(":")
    if kind == "extrapolate":
        return [rest.partition(":")[0]]
    if kind == "group":
        return [c for c in rest.split(",") if c]
    return []


def _check_request(data: pd.DataFrame, split: str, ops: list[str] | None) -> list[str]:
    """Refuse ops the data does not hold and split columns no op has all of; return those
    columns (none for random and kfold splits). Ops lacking them are skipped by the caller."""
    known = sorted(data["op"].unique())
    if ops and (unknown := [o for o in ops if o not in known]):
        raise OpatlasError(f"--op {', '.join(unknown)}: not in this data; it holds "
                           f"{', '.join(known)}")
    cols = split_columns(split)
    if not cols:
        return cols
    chosen = data if not ops else data[data["op"].isin(ops)]
    params = [set(shapes_of(g.head(1))) for _, g in chosen.groupby("op")]
    if not any(set(cols) <= have for have in params):
        what = f"a parameter {cols[0]!r}" if len(cols) == 1 else \
            f"all of the parameters {', '.join(map(repr, cols))}"
        raise OpatlasError(f"--split {split}: no op here has {what} (they have "
                           f"{', '.join(sorted(set().union(*params)))})")
    return cols


def evaluate_all(data: pd.DataFrame, recipe: str = "hybrid", split: str = "random",
                 ops: list[str] | None = None, baseline: bool = True,
                 progress: bool = False) -> list[Evaluation]:
    """Every (op, pass, device, dtype) of ``data`` whose split trains each fold on at least
    ``MIN_FIT_ROWS`` rows, fitted and tested on ``split``; the groups left out (too few rows,
    not the split's column) are said on stderr, and an error names them when none is left.
    ``progress``: show the fits' progress on stderr (a bar on a terminal, else log lines)."""
    cols = _check_request(data, split, ops)
    todo, skipped = [], []
    several = len(data[["device", "dtype"]].drop_duplicates()) > 1
    for (op, pass_, name, dtype), g in data.groupby(["op", "pass", "device", "dtype"],
                                                    sort=True):
        if ops and op not in ops:
            continue
        label = group_label(op, pass_, name, dtype, several)
        if len(g) < MIN_FIT_ROWS:
            skipped.append(f"{label}: {len(g)} rows")
        elif missing := [c for c in cols if c not in shapes_of(g.head(1))]:
            skipped.append(f"{label}: no {', '.join(missing)}")
        else:
            todo.append((name, dtype, label, g.reset_index(drop=True)))
    out = _evaluate_each(data, todo, recipe, split, baseline, skipped, progress)
    need = f"a model is fitted on at least {MIN_FIT_ROWS} rows" + \
        (f", and the split needs {', '.join(cols)}" if cols else "")
    if not out:
        raise OpatlasError(f"nothing to evaluate with split {split}: "
                           f"{'; '.join(skipped) or 'no rows'} ({need})")
    if skipped:
        warnings.warn(f"not evaluated: {'; '.join(skipped)} ({need})", UserWarning,
                      stacklevel=2)
    return out


def _evaluate_each(data: pd.DataFrame, todo: list, recipe: str, split: str, baseline: bool,
                   skipped: list[str], progress: bool) -> list[Evaluation]:
    """Each planned group evaluated in turn; a split leaving a fold too few rows adds the
    group to ``skipped``."""
    from contextlib import nullcontext

    from opatlas.run.progress import Progress

    out, devices = [], {}
    bar = Progress(len(todo), label=f"fit {recipe}", unit="models",
                   log_every=max(1, len(todo) // 10)) if progress and todo else None
    with bar or nullcontext():
        for name, dtype, label, g in todo:
            if (name, dtype) not in devices:  # an unknown device: described by all its data
                devices[name, dtype] = data_device(data, name, dtype)
            status = "ok"
            try:
                out.append(evaluate_group(g, recipe, split, baseline, devices[name, dtype],
                                          label))
            except TooFewRows as exc:
                skipped.append(str(exc))
                status = "skipped"
            if bar is not None:
                bar.advance(status, detail=label.replace("/", " "))
    return out
