"""Training data for op models: a results store, a folder of estimate-train-time CSVs, or a
bundled dataset (``bundled``/``a100``: A100 samples; ``h100``: the H100 catalog sweep). One
row per measured (vector, pass): op, pass, device, dtype, the shape parameters, and ``y_us``
(the median time in µs)."""

from __future__ import annotations

import csv
import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from opatlas.errors import OpatlasError
from opatlas.fit.catalog import in_catalog, module_needed, unknown_device_note


def load_op_data(source: str | Path = "bundled") -> pd.DataFrame:
    """The rows of a store file, a folder of estimate-train-time sample CSVs or one such CSV.
    A shape a CSV samples more than once is one row over all its values, as ``import
    ett-samples`` stores it (:func:`opatlas.store.ett.merge_repeats`): a folder and its
    import give the same rows, and no shape can be both trained and tested on."""
    from opatlas.samples import op_data_path
    from opatlas.store import Store
    from opatlas.store.ett import parse_sample_name

    path = op_data_path(source)
    if path.is_dir() or (path.is_file() and path.suffix.lower() == ".csv"):
        files = sorted(path.rglob("*.csv")) if path.is_dir() else [path]
        if path.is_file() and parse_sample_name(path) is None:
            raise OpatlasError(f"op data {path}: a CSV of op samples is an estimate-train-time "
                               f"sample file named {{GPU}}_{{op}}_{{precision}}.csv (e.g. "
                               f"MyGPU_linear1_fp16.csv)")
        df = _sample_rows([f for f in files if parse_sample_name(f) is not None])
        if df.empty:
            raise OpatlasError(f"no estimate-train-time sample CSVs under {path}")
    elif path.is_file():
        with Store(path, read_only=True) as st:
            res = st.results(expand_params=False)
        res = res[res["status"] == "ok"]
        df = pd.DataFrame({"op": res["op"], "pass": res["pass"], "device": res["device"],
                           "dtype": res["dtype"], "params_json": res["params_json"],
                           "y_us": res["median_ns"] / 1000.0, "flops": res["flops"],
                           "min_bytes": res["min_bytes"]})
    else:
        raise OpatlasError(f"op data {source} (--data, or a config's ops.data): no such store "
                          f"file or folder")
    df = df[~df["op"].str.startswith(("nccl.", "collective."))].reset_index(drop=True)
    return with_defaults(df)


def with_defaults(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with each op's rows on the same parameters: one a spec left out (``mp`` where
    another spec gave ``mp: [2]``) set to the catalog's default in ``params_json``
    (:func:`opatlas.sweep.expand.fill_omitted`; the store and its vector ids are unchanged).
    A row still lacking one (no default) is left out, as it has no value for a feature. Both
    are said on stderr, once per load."""
    from opatlas.sweep.expand import fill_omitted, params_json

    texts = df["params_json"].to_numpy(object).copy()
    keep = np.ones(len(df), dtype=bool)
    notes: list[str] = []
    # per model group's data (op, device, dtype), as each model is fitted and the ETT export
    # writes its files: one device's extra parameter is no gap in another device's rows
    keys = [k for k in ("op", "device", "dtype") if k in df.columns]
    several = any(df[k].nunique() > 1 for k in keys[1:])
    for key, at in df.groupby(keys, sort=True).indices.items():
        key = key if isinstance(key, tuple) else (key,)
        op = str(key[0])
        fill = fill_omitted(op, (json.loads(s) for s in texts[at]))
        if not (fill.filled or fill.lacking):
            continue
        label = f"{op} on {' '.join(map(str, key[1:]))}" if several else op
        notes += fill.notes(label, "row(s) of the data", "left out of the fit")
        texts[at] = [params_json(p) for p in fill.params]
        keep[at[fill.incomplete]] = False
    for note in notes:
        print(f"opatlas: note: {note}", file=sys.stderr)
    if not notes:
        return df
    return df.assign(params_json=texts)[keep].reset_index(drop=True)


def uncatalogued(frame: pd.DataFrame, ops: list[str] | None = None) -> list[str]:
    """The ops of ``frame`` (those of ``ops`` when given) whose rows carry the counts (FLOPs)
    ``opatlas run`` recorded, yet which the catalog lacks now: a user's own ops, run with their
    ``--ops-module``, which is not loaded. Without it their defaults and counts are unknown
    (rows leaving a parameter out cannot be filled; the hybrid model has no roofline)."""
    if "flops" not in frame:  # estimate-train-time's CSVs: no counts were recorded
        return []
    counted = frame.loc[frame["flops"].notna().to_numpy(), "op"].unique()
    return [op for op in sorted(map(str, counted))
            if (ops is None or op in ops) and not in_catalog(op)]


def check_catalogued(frame: pd.DataFrame, source: str | Path,
                     ops: list[str] | None = None) -> None:
    """Refuse to fit ops of ``frame`` (of ``ops`` when given) that are :func:`uncatalogued`."""
    missing = uncatalogued(frame, ops)
    if missing:
        raise module_needed(missing, f"the op data {source} holds the counts (FLOPs, bytes) "
                                     f"opatlas run recorded of "
                                     f"{'it' if len(missing) == 1 else 'them'}",
                            "; or fit the other ops (--op)")


def _sample_rows(files: list[Path]) -> pd.DataFrame:
    """The rows of estimate-train-time sample CSVs (named as such), repeated shapes merged
    per file. A file lacking a column its catalog op needs, or holding no rows, is refused:
    its rows would fit a model of another op (no ``dim``: no counts, no roofline), or none."""
    from opatlas.store.ett import merge_repeats, read_sample_file

    rows = []
    for f in files:
        read = read_sample_file(f, counts=False)
        if not read:
            raise OpatlasError(_no_rows(f))
        rows += merge_repeats(read)[0]
    return pd.DataFrame([{"op": r.op, "pass": r.pass_, "device": r.device, "dtype": r.dtype,
                          "params_json": r.params_json, "y_us": r.median_ns / 1000.0}
                         for r in rows],
                        columns=["op", "pass", "device", "dtype", "params_json", "y_us"])


def _no_rows(path: Path) -> str:
    """Why a sample CSV gave no rows: only its header, or no row with a time."""
    from opatlas.store.ett import PASS_COLUMNS

    with path.open(newline="", encoding="utf-8-sig") as f:
        header, *lines = [c for c in csv.reader(f) if any(x.strip() for x in c)] or [[]]
    header = [c.strip() for c in header]
    times = ", ".join(c for c in header if c in PASS_COLUMNS)
    if not lines:
        return (f"{path}: holds no rows, only its header ({', '.join(header)}); an "
                f"estimate-train-time sample CSV has one row per sampled shape")
    return f"{path}: holds no timed rows: each of its {len(lines)} row(s) leaves {times} empty"


def shapes_of(df: pd.DataFrame) -> pd.DataFrame:
    """The parameter columns of a data subset (one op), numeric where possible; a parameter
    some rows leave out is the op's catalog default in them (as :func:`with_defaults` has
    set it in rows from :func:`load_op_data`), never a NaN feature."""
    from opatlas.sweep.expand import fill_omitted

    rows = [json.loads(s) for s in df["params_json"]]
    if "op" in df and df["op"].nunique() == 1:
        rows = fill_omitted(str(df["op"].iloc[0]), rows).params
    shapes = pd.DataFrame(rows, index=df.index)
    return shapes.drop(columns=[c for c in ("dtype",) if c in shapes])


def data_hash(df: pd.DataFrame) -> str:
    h = hashlib.sha256(pd.util.hash_pandas_object(df, index=False).values.tobytes())
    return h.hexdigest()[:16]


def device_keys(df: pd.DataFrame) -> pd.Series:
    """Each row's device under one key per device (:func:`opatlas.devices.device_key`), so a
    lookup by any alias finds data recorded under any other."""
    from opatlas.devices import device_key

    names = df["device"].astype(str)
    return names.map({u: device_key(u) for u in names.unique()})


def holdings(df: pd.DataFrame) -> str:
    """What a data set holds, for error messages: each device, its dtypes and op counts."""
    parts = []
    for (device, dtype), g in df.groupby(["device", "dtype"], sort=True):
        parts.append(f"{device} {dtype} ({g['op'].nunique()} ops)")
    return "; ".join(parts) if parts else "nothing"


def data_device(data: pd.DataFrame, name: str, dtype: str):
    """The catalog entry for ``name``; for a device the catalog does not know, the roofline
    that the device's own rows (all ops, ``dtype``) attain, said in one line on stderr."""
    import warnings

    from opatlas.devices import device_key, empirical_device, find_device

    found = find_device(name)
    if found is not None:
        return found
    rows = data[(device_keys(data) == device_key(name)).to_numpy()
                & (data["dtype"] == dtype).to_numpy()]
    flops, nbytes = op_counts(rows, dtype)
    _check_countable(rows, name, flops, nbytes)
    dev = empirical_device(device_key(name), flops, nbytes, rows["y_us"].to_numpy(float) * 1e-6,
                           dtype)
    said = (device_key(name), dtype, len(rows), dev.peak(dtype), dev.bandwidth)
    if said not in _SAID:  # once per device and data, whichever spelling asks again
        _SAID.add(said)
        warnings.warn(unknown_device_note(name, dev.peak(dtype), dev.bandwidth, dtype, len(rows)),
                      UnknownDeviceWarning, stacklevel=2)
    return dev


def _check_countable(rows: pd.DataFrame, name: str, flops: np.ndarray,
                     nbytes: np.ndarray) -> None:
    """Refuse a device outside the catalog whose rows have no counts because their ops are
    outside it too: a user's op run without its ``--ops-module`` (its counts unrecorded) is
    named, with the option, rather than said to lack counts."""
    if (np.isfinite(flops) & np.isfinite(nbytes)).any():
        return
    ops = sorted(str(op) for op in rows["op"].unique() if not in_catalog(str(op)))
    if ops:
        one = len(ops) == 1
        raise OpatlasError(
            f"device {name!r} is not in the catalog and its data has no FLOP or byte counts "
            f"to derive a roofline from: {'op' if one else 'ops'} {', '.join(map(repr, ops))} "
            f"{'is' if one else 'are'} not in the op catalog; if "
            f"{'it is an op' if one else 'they are ops'} of your own, pass the module that "
            f"registers {'it' if one else 'them'} with --ops-module FILE")


_SAID: set[tuple] = set()


class UnknownDeviceWarning(UserWarning):
    """A device outside the catalog, described by its own measurements."""


def op_counts(rows: pd.DataFrame, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """FLOPs and bytes of each row: the store's columns where recorded, else the catalog's
    counts for the row's op and pass (NaN for ops the catalog does not count)."""
    from opatlas.ops.batch import batch_counts

    flops = rows["flops"].to_numpy(float) if "flops" in rows else np.full(len(rows), np.nan)
    nbytes = rows["min_bytes"].to_numpy(float) if "min_bytes" in rows else \
        np.full(len(rows), np.nan)
    flops, nbytes = flops.copy(), nbytes.copy()
    todo = ~(np.isfinite(flops) & np.isfinite(nbytes))
    if not todo.any():
        return flops, nbytes
    pos = pd.Series(np.arange(len(rows)), index=rows.index)
    for (op, pass_), g in rows[todo].groupby(["op", "pass"], sort=False):
        try:
            c = batch_counts(op, shapes_of(g).assign(dtype=dtype))
            at = pos[g.index].to_numpy()
            flops[at] = c[f"flops_{pass_}"].to_numpy(float)
            nbytes[at] = c[f"bytes_{pass_}"].to_numpy(float)
        except Exception:  # ops outside the catalog (or shapes it rejects) have no counts
            continue
    return flops, nbytes


def alias_rows(frame: pd.DataFrame, names: list[str]) -> tuple[pd.DataFrame, list[str]]:
    """``frame`` with the rows of each alias in ``names`` the data lacks by that name
    (``linear1``) but files under the op the alias fixes (``linear`` rows of role qkv; a row
    leaving the parameter out has the op's default), copied under the alias's name; and a
    note for each, as ``opatlas results --op`` finds them."""
    from opatlas.ops.registry import filed_as, get_op

    have, extra, notes = set(frame["op"].unique()), [], []
    for name in names:
        if name in have:
            continue
        for stored, values in filed_as(name, sorted(have)):
            if not values:  # a name of the same op (an ETT name): the caller maps those
                continue
            default = {k: get_op(name)[0].defaults.get(k) for k in values}
            rows = frame[frame["op"] == stored]
            keep = np.array([all(p.get(k, default[k]) == v for k, v in values.items())
                             for p in map(json.loads, rows["params_json"])], dtype=bool)
            if keep.any():
                extra.append(rows[keep].assign(op=name))
                notes.append(f"--op {name}: the data files it as {stored!r} (its "
                             f"{int(keep.sum())} rows with "
                             f"{', '.join(f'{k}={v}' for k, v in values.items())})")
    return (pd.concat([frame, *extra], ignore_index=True) if extra else frame), notes
