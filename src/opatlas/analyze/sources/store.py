"""A results store (DuckDB): one row per measured vector and pass, with the measured median, a
model's prediction made without that row (5-fold cross-validation of the fit recipe per op,
pass, device and dtype; or, with ``--models DIR``, the models ``opatlas fit --out DIR`` saved:
fitted on their own data, which may hold these rows, so not held out), the roofline and
Orojenesis bounds, the error and the headroom. Groups are devices.

Collectives (estimate-train-time's ``nccl.*`` samples, opatlas's ``collective.*``) are bounded
by their bus bytes (nccl-tests' factors, :func:`opatlas.ops.collectives.bus_factor`) over the
fastest link, the intra-node link of the device's own system
(:func:`opatlas.estimate.presets.preset_for_device`): a stored row does not say how its ranks
were placed (a config's collectives are bounded on the link their ranks cross); estimate-train-time's
``optimizer`` samples as the catalog's AdamW step (``adam_step``) over their parameters.

A device outside the catalog is described by its own rows (:func:`why.empirical_peaks`), said
in a note; rows under their bound are flagged by :func:`why.explain` and said in one note by
the API (:func:`opatlas.analyze.api.said_below_bound`)."""

from __future__ import annotations

import contextlib
import json
import math
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from opatlas.analyze.model import Analysis, Column, Source
from opatlas.analyze.sources import ReadOptions, SourceKind, register
from opatlas.analyze.sources.held_out import Job, predict_all
from opatlas.analyze.why import (
    WHY_FIRST,
    WHY_REST,
    Peaks,
    empirical_peaks,
    empirical_peaks_text,
    explain,
    gemm_of,
    pass_gemms,
    search_traffic,
    unknown_traffic,
)
from opatlas.errors import OpatlasError
from opatlas.run.progress import Progress

HELD_OUT_HELP = "by a model fitted without this row (5-fold cross-validation)"
COLUMNS = [
    Column(key="op", label="op", role="id"),
    Column(key="pass", label="pass", role="id"),
    Column(key="group", label="device", role="group"),
    Column(key="calls", label="calls", role="count"),
    Column(key="time_s", label="measured", role="measured", unit="s", help="median per call"),
    Column(key="predicted_time_s", label="predicted", role="estimated", unit="s",
           help=HELD_OUT_HELP),
    Column(key="error", label="error", role="error", unit="%",
           help="(predicted - measured) / measured"),
    *WHY_FIRST,
    Column(key="flops", label="FLOPs", role="count", unit="FLOP"),
    Column(key="bytes", label="bytes", role="count", unit="B",
           help="minimum bytes for kernels, message bytes for collectives"),
    *WHY_REST,
    Column(key="shape", label="shape", role="shape"),
]


def detect(path: Path) -> bool:
    if path.suffix in (".duckdb", ".db"):
        return True
    if not path.is_file():
        return False
    with path.open("rb") as fh:
        head = fh.read(16)
    return len(head) >= 12 and head[8:12] == b"DUCK"


def read(path: Path, options: ReadOptions) -> Analysis:
    from opatlas.store import Store

    if not path.is_file():
        raise OpatlasError(f"{path}: no such results store")
    if options.models is not None:
        _check_models(options.models)
    with Store(path, read_only=True) as st:
        res = st.results(status="ok", expand_params=False)
    if res.empty:
        raise OpatlasError(f"{path}: the store has no successful measurements to analyse")
    res = _of_device(res, options.extra.get("device"), path)
    tables, notes, said, onchip = [], [], [], {}
    with _progress(len(res), f"held-out fits ({path.name})", "rows") as bar:
        for (dev, dtype), g in res.groupby(["device", "dtype"], sort=True):
            tables.append(_device_rows(dev, dtype, g.reset_index(drop=True), notes,
                                       options.models, said, onchip, bar))
    keys = sorted({k for rows, peaks in tables
                   for k in unknown_traffic(rows["gemms"].tolist(), peaks)})
    with _progress(len(keys), "Orojenesis bounds", "GEMMs") as bar:
        search_traffic(keys, bar)
    rows = pd.concat([_explained(rows, peaks) for rows, peaks in tables], ignore_index=True)
    if notes and options.strict:  # a missing prediction is a fallback: an error under --strict
        raise OpatlasError(f"{path}: {notes[0]} (--strict)")
    # ``said``: what the device itself lacks (an on-chip size, for the Orojenesis bound), as
    # the empirical roofline it comes with: a note, not a fallback --strict refuses
    summary = _summary(rows, res, said + notes, max(onchip.values()))
    return Analysis(Source(kind="store", path=str(path)), summary, rows,
                    _columns(options.models, rows), "device")


def _of_device(res: pd.DataFrame, device: str | None, path: Path) -> pd.DataFrame:
    """The rows of ``device`` (--device) under any of its names: the catalog's name or an
    alias (A100, A100-SXM4-80GB and NVIDIAA100-SXM4-80GB are one device), as fit and predict
    match them (:func:`opatlas.devices.device_key`), in any case, as the catalog's are."""
    from opatlas.devices import device_key

    if not device:
        return res
    names = res["device"].astype(str)
    keys = names.map({n: device_key(n).lower() for n in names.unique()})
    mine = res[(keys == device_key(device).lower()).to_numpy()]
    if mine.empty:
        raise OpatlasError(f"{path}: the store has no measurements for device {device!r}; "
                           f"it has {', '.join(sorted(names.unique()))}")
    return mine


def _check_models(models: Path) -> None:
    """--models names a folder of saved models (``opatlas fit --out DIR``): one that does not
    exist, or holds none, is a mistake to say, not a reason to cross-validate everything."""
    how = "save models with: opatlas fit --data STORE --out DIR"
    if not models.exists():
        raise OpatlasError(f"--models {models}: no such folder ({how})")
    if not models.is_dir():
        raise OpatlasError(f"--models {models}: a file, not a folder of saved models ({how})")
    # the model registry's layout: DIR/device/dtype/recipe/op/pass.joblib
    if next(models.glob("*/*/*/*/*.joblib"), None) is None:
        raise OpatlasError(f"--models {models}: the folder holds no saved model "
                           f"(DEVICE/DTYPE/RECIPE/OP/PASS.joblib); {how}")


def _columns(models: Path | None, rows: pd.DataFrame) -> list[Column]:
    """The columns, the predictions described by where they came from: saved models (not
    held out: they may have been fitted on these very rows) or cross-validation."""
    if models is None:
        return list(COLUMNS)
    saved = rows["predicted_by"].eq("saved")
    text = (f"by the model saved under {models} (opatlas fit --out): not held out, in-sample "
            f"where that model was fitted on these measurements")
    if not saved.all():
        text += f"; {HELD_OUT_HELP} where the folder has no model for the op"
    out = []
    for c in COLUMNS:
        out.append(c.model_copy(update={"help": text}) if c.key == "predicted_time_s" else c)
        if c.key == "predicted_time_s":
            out.append(Column(key="predicted_by", label="predicted by", role="text",
                              help="saved: by a model of --models; held out: cross-validated"))
    return out


def _progress(total: int, label: str, unit: str) -> Any:
    """Progress on stderr for work that lasts (:class:`_LateProgress`), whatever its size;
    nothing for no work at all."""
    if total <= 0:
        return contextlib.nullcontext(None)
    return _LateProgress(total, label, unit)


class _LateProgress:
    """A progress bar on a terminal's stderr, else a line on stderr every tenth of the work
    (and every 30 s), from ``DELAY`` seconds on: quick work says nothing, slow work is never
    silent however few its rows (a store of 2,000 rows is tens of seconds of fits). A timer
    shows it at ``DELAY`` even while one long step has not ended; ``advance`` is as
    :class:`~opatlas.run.progress.Progress`'s. Never on stdout, which may hold --json."""

    DELAY = 2.0

    def __init__(self, total: int, label: str, unit: str) -> None:
        self.total, self.label, self.unit = total, label, unit
        self.stream = sys.stderr  # the one of now: a test's capture, a redirected stderr
        self.start = time.monotonic()
        self.done, self.detail = 0, ""
        self.bar: Progress | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._timer = threading.Timer(self.DELAY, self._show)
        self._timer.daemon = True

    def __enter__(self) -> _LateProgress:
        self._timer.start()
        return self

    def advance(self, status: str, count: int = 1, detail: str | None = None) -> None:
        with self._lock:
            self.done += count
            self.detail = detail if detail is not None else self.detail
            if self.bar is None and time.monotonic() - self.start >= self.DELAY:
                self._show_locked()  # shows what was done so far
            elif self.bar is not None:
                self.bar.advance(status, count, detail)

    def _show(self) -> None:
        with self._lock:
            if self.bar is None and not self._closed:
                self._show_locked()

    def _show_locked(self) -> None:
        """Start the bar (the lock held), counting the work done before it showed."""
        bar = Progress(self.total, label=self.label, unit=self.unit,
                       log_every=max(1, self.total // 10), stream=self.stream).__enter__()
        bar.t0 = self.start  # the rate counts the work done before the bar showed
        self.bar = bar
        if not bar.interactive:  # a log line now: the next waits for a tenth of the work
            print(f"opatlas: {self.label}: {self.done:,} of {self.total:,} {self.unit} done "
                  f"after {time.monotonic() - self.start:.0f} s; progress follows",
                  file=self.stream, flush=True)
        if self.done:
            bar.advance("ok", self.done, self.detail or None)

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()
        with self._lock:
            self._closed = True
            if self.bar is not None:
                self.bar.__exit__(*exc)


# dtype names the catalog writes shorter: tt-metal's (BFLOAT16, FLOAT32) and PyTorch's
DTYPE_NAMES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32",
               "float": "fp32", "float64": "fp64", "float8": "fp8"}


def _device_rows(device_name: str, dtype: str, res: pd.DataFrame, notes: list[str],
                 models: Path | None = None, said: list[str] | None = None,
                 onchip: dict[str, float] | None = None, progress: Any = None
                 ) -> tuple[pd.DataFrame, Peaks]:
    """The rows of one device and dtype, predicted, with what bounds them (for
    :func:`_explained`) and the device's peaks. ``notes``: fallbacks (--strict refuses
    them); ``said``: what the device lacks; ``onchip``: device -> its on-chip bytes (0: not
    known); ``progress``: advanced by rows."""
    data = pd.DataFrame({"device": device_name, "dtype": dtype, "op": res["op"],
                         "pass": res["pass"], "y_us": res["median_ns"] / 1e3,
                         "flops": res["flops"], "min_bytes": res["min_bytes"]})
    dev, peaks = _device_peaks(device_name, dtype, data, notes, said)
    word = peaks.word_bytes
    shapes = pd.DataFrame([{k: v for k, v in json.loads(s).items() if k != "dtype"}
                           for s in res["params_json"]])
    rows = pd.DataFrame({"op": res["op"], "pass": res["pass"], "calls": 1.0,
                         "time_s": res["median_ns"] * 1e-9, "flops": res["flops"],
                         "bytes": res["min_bytes"], "group": device_name,
                         "shape": [dict(json.loads(s)) for s in res["params_json"]],
                         # the measurement's own spread, for the op detail
                         "repeats": res["repeats"], "mean_s": res["mean_ns"] * 1e-9,
                         "std_s": res["std_ns"] * 1e-9, "min_s": res["min_ns"] * 1e-9,
                         "max_s": res["max_ns"] * 1e-9, "backend": res["backend"]})
    rows["predicted_time_s"] = np.nan
    rows["predicted_by"] = "held out"  # or "saved": a model of --models
    rows["gemms"] = None
    rows["gemm"] = None
    rows["limiter"] = None  # "communication" for collectives; kernels get theirs from explain
    rows["comm_bound_s"] = np.nan
    link = _link(device_name)
    jobs = []
    for (op, pass_), idx in rows.groupby(["op", "pass"], sort=False).groups.items():
        sub = shapes.loc[idx].dropna(axis=1, how="all")
        saved = _saved_model(models, device_name, dtype, op, pass_) if models else None
        if saved is not None:
            rows.loc[idx, "predicted_time_s"] = saved.predict(sub.reset_index(drop=True)) * 1e-6
            rows.loc[idx, "predicted_by"] = "saved"
            if progress is not None:
                progress.advance("ok", len(idx), detail=f"{op} {pass_}")
        else:
            if models:
                notes.append(f"{op} {pass_}: no model under {models} for {device_name} {dtype}; "
                             f"cross-validated instead")
            jobs.append(Job(idx, op, pass_, dev, dtype, sub, rows.loc[idx, "time_s"].to_numpy()))
        _gemms(rows, idx, op, pass_, sub, dtype)
        bound_said = _collectives(rows, idx, op, sub, word, device_name, link) \
            or _on_chip_move(rows, idx, op) or _stands_for(rows, idx, op, pass_, sub, dtype)
        if said is not None and bound_said and bound_said not in said:
            said.append(bound_said)
    said_of: dict[int, list[str]] = {}  # by job: pooled jobs end in any order
    for job, predicted, said_here in predict_all(jobs, progress):
        rows.loc[job.key, "predicted_time_s"] = predicted
        said_of[id(job)] = said_here
    notes.extend(note for job in jobs for note in said_of[id(job)])
    rows["error"] = (rows["predicted_time_s"] - rows["time_s"]) / rows["time_s"]
    if onchip is not None:
        onchip[device_name] = max(onchip.get(device_name, 0.0), float(peaks.onchip_bytes))
    msg = (f"{device_name}: no Orojenesis bound (oro bytes, oro time): the size of its "
           f"on-chip buffer is not known (a device outside the catalog, described by its own "
           f"data); the GEMMs' bound is the roofline alone")
    if peaks.onchip_bytes <= 0 and rows["gemms"].notna().any() and said is not None \
            and msg not in said:
        said.append(msg)
    return rows, peaks


# a store's collectives: bounded by a link (:func:`_collectives`), never by the device's
# roofline, so their rows neither describe a device outside the catalog nor need one
COLLECTIVE_PREFIXES = ("collective.", "nccl.")


def _device_peaks(device_name: str, dtype: str, data: pd.DataFrame, notes: list[str],
                  said: list[str] | None) -> tuple[Any, Peaks]:
    """The device of ``data`` (one device and dtype) and its peaks at ``dtype``. A device
    outside the catalog is described by its kernels' rows alone: a collective's message bytes
    are link traffic, no evidence of its memory bandwidth; with no kernel row at all, it has
    no roofline (NaN FLOP/s, no memory roof), which only kernels would need."""
    from opatlas.devices import Device, find_device
    from opatlas.fit.data import UnknownDeviceWarning, data_device

    kernels = data[~data["op"].astype(str).str.startswith(COLLECTIVE_PREFIXES).to_numpy()]
    catalog = _catalog_name(device_name, said)
    word = _word_bytes(device_name, dtype, notes)
    empirical = find_device(catalog) is None
    if empirical and kernels.empty:
        return (Device(device_name, {}, math.inf, 0.0, math.inf, 1,
                       "no kernel measured: no roofline"),
                Peaks(device_name, math.nan, math.inf, 0.0, word))
    with warnings.catch_warnings():  # a device outside the catalog: empirical_peaks says it
        warnings.simplefilter("ignore", UnknownDeviceWarning)
        dev = data_device(kernels, catalog, dtype)
    peaks = Peaks(dev.name, _peak_flops(dev, dtype, notes), dev.bandwidth, dev.onchip_bytes,
                  word)
    if empirical:  # said in the notes, kept with --save
        peaks, text = empirical_peaks(device_name, peaks.flops_s, peaks.bytes_s, dtype, word,
                                      kernels["flops"], kernels["min_bytes"])
        if said is not None:
            said.extend(n for n in text if n not in said)
    return dev, peaks


def _word_bytes(device_name: str, dtype: str, notes: list[str]) -> int:
    """Bytes of one ``dtype`` word; 4 for a dtype the op catalog does not know (a note)."""
    from opatlas.ops.base import dtype_bytes

    try:  # tt-metal's bfloat16 is the catalog's bf16
        return dtype_bytes(DTYPE_NAMES.get(dtype.lower(), dtype))
    except OpatlasError:
        notes.append(f"{device_name}: dtype {dtype!r} is not one the op catalog knows: its "
                     f"words taken as 4 bytes")
        return 4


def _peak_flops(dev: Any, dtype: str, notes: list[str]) -> float:
    """``dev``'s peak at ``dtype`` (the catalog's name, or an empirical device's: the store's);
    its best peak, said in ``notes``, when it has none for ``dtype``."""
    kind = DTYPE_NAMES.get(dtype.lower(), dtype)
    if kind in dev.peak_flops or dtype in dev.peak_flops:
        return dev.peak(kind if kind in dev.peak_flops else dtype)
    best = max(dev.peak_flops, key=dev.peak_flops.__getitem__)
    notes.append(f"{dev.name} has no peak FLOP/s for dtype {dtype!r} (it has "
                 f"{', '.join(sorted(dev.peak_flops))}): its {best} peak is used")
    return dev.peak_flops[best]


def _catalog_name(device: str, said: list[str] | None = None) -> str:
    """The name to look ``device`` up in the catalog under: a Tenstorrent backend's device
    (``wormhole_b0-sim`` under any parameters, ttnn's ``wormhole_b0-card<N>``) takes the
    peaks of its chip (the catalog's Wormhole's), an assumption said in ``said``; any other
    device is its own name."""
    from opatlas.devices import find_device
    from opatlas.tenstorrent.backend import chip_of

    chip = chip_of(device) if find_device(device) is None else None
    found = find_device(chip[0]) if chip else None
    if chip is None or found is None:
        return device
    note = (f"{device}: {chip[1]}; the device's peaks are the catalog's {found.name}'s, "
            f"assumed to be its chip")
    if said is not None and note not in said:
        said.append(note)
    return found.name


def _explained(rows: pd.DataFrame, peaks: Peaks) -> pd.DataFrame:
    out = explain(rows, peaks)
    out["device_peak_flops_s"], out["device_peak_bytes_s"] = peaks.flops_s, peaks.bytes_s
    return out


def _saved_model(root: Path, device: str, dtype: str, op: str, pass_: str) -> Any:
    """A model saved by ``opatlas fit --out DIR`` (the model registry's layout), or None."""
    from opatlas.devices import device_key
    from opatlas.fit.registry import ModelRegistry

    reg = ModelRegistry(root)
    # fit files models under the device's catalog name (the store may hold an alias, e.g.
    # the name the GPU reports), older folders under the name as recorded
    for name in dict.fromkeys((device_key(device), device)):
        if (found := reg.load_saved(name, dtype, op, pass_)) is not None:
            return found[0]
    return None


def _gemms(rows: pd.DataFrame, idx: Any, op: str, pass_: str, shapes: pd.DataFrame,
           dtype: str) -> None:
    from opatlas.ops.batch import batch_counts

    try:
        counts = batch_counts(op, shapes.assign(dtype=dtype))
    except Exception:  # an op outside the catalog: no GEMM to bound
        return
    for i, (_, c) in zip(idx, counts.iterrows(), strict=True):
        g = gemm_of(c)
        if g is not None and pass_ in ("fwd", "bwd"):
            rows.at[i, "gemms"] = pass_gemms(g, pass_)
            rows.at[i, "gemm"] = list(g)


def _collective(op: str) -> str | None:
    """The collective a store's op measures, as :func:`opatlas.ops.collectives.bus_factor`
    names it: opatlas's own (``collective.all_reduce`` ...) or estimate-train-time's NCCL
    samples (``nccl.allreduce_large`` ...: their file stems, as the estimator reads them);
    None for any other op."""
    from opatlas.estimate.comm import Measured
    from opatlas.ops.collectives import COLLECTIVES

    if op.startswith("collective."):
        name = op.removeprefix("collective.")
        return name if name in COLLECTIVES else None
    stem = op.removeprefix("nccl.")
    found = [name for name, stems in Measured.NAMES.items() if stem in stems]
    if not op.startswith("nccl.") or not found:
        return None
    return "send_recv" if found[0] == "p2p" else found[0]


def _link(device: str) -> tuple[float, str] | None:
    """(bytes/s, where from) of the fastest link of ``device``: the intra-node link (NVLink)
    per GPU and direction of the cluster preset built around it (its DGX system's
    datasheet); None when no preset is."""
    from opatlas.estimate.presets import preset_for_device

    found = preset_for_device(device)
    if found is None:
        return None
    name, preset = found
    return preset.intra_bw_gbps * 1e9, (
        f"{device}: a collective's bound is its bus bytes (nccl-tests' factors) over the "
        f"intra-node link of its system, {preset.intra_bw_gbps:g} GB/s per GPU and direction "
        f"(cluster preset {name}: {preset.source}); the fastest link, so the bound of a group "
        f"across nodes (network {preset.inter_bw_gbps:g} GB/s per GPU) is loose")


def _collectives(rows: pd.DataFrame, idx: Any, op: str, shapes: pd.DataFrame, word: int,
                 device: str, link: tuple[float, str] | None) -> str | None:
    """Bound the rows ``idx`` of ``op`` if it is a collective: the limiter is communication,
    ``bytes`` the message, ``comm_bound_s`` its bus bytes over ``link``. Returns what the
    notes should say (which link, or why there is no bound); None for other ops."""
    from opatlas.ops.collectives import bus_factor

    name = _collective(op)
    if name is None:
        if op.startswith(COLLECTIVE_PREFIXES):
            return (f"{op}: a collective whose bus traffic opatlas does not know (it knows "
                    f"all-reduce, all-gather, reduce-scatter, all-to-all and point-to-point): "
                    f"no bound")
        return None
    rows.loc[idx, "limiter"] = "communication"
    sizes = _collective_sizes(op, shapes, rows.loc[idx, "bytes"], word)
    if sizes is None:
        return f"{op}: its parameters give no message size or ranks: no bound"
    ranks, nbytes = sizes
    rows.loc[idx, "bytes"] = nbytes
    rows.loc[idx, "flops"] = 0.0
    if link is None:
        return (f"no link bandwidth known for device {device} (no cluster preset is built "
                f"around it): collectives have no bound")
    factor = np.array([bus_factor(name, max(int(n), 1)) for n in ranks])
    rows.loc[idx, "comm_bound_s"] = rows.loc[idx, "calls"].to_numpy(float) * factor * nbytes \
        / link[0]
    return link[1]


def _collective_sizes(op: str, shapes: pd.DataFrame, stored: pd.Series, word: int
                      ) -> tuple[np.ndarray, np.ndarray] | None:
    """(ranks, message bytes) per row: estimate-train-time's NCCL samples give ``shape``
    elements of their dtype on ``nodes`` x ``GPUsPerNode`` ranks (an all-gather's: one rank's
    input, so its message is ranks x that); opatlas's own give
    ``elements`` on ``world_size`` ranks and store the bytes. None where they lack them."""
    def col(key: str) -> np.ndarray:
        return pd.to_numeric(shapes[key], errors="coerce").to_numpy(float)

    if op.startswith("nccl.") and {"shape", "nodes", "GPUsPerNode"} <= set(shapes):
        from opatlas.estimate.comm import sample_message_bytes

        ranks = col("nodes") * col("GPUsPerNode")
        return ranks, sample_message_bytes(_collective(op) or "", col("shape"), word, ranks)
    if op.startswith("collective.") and {"elements", "world_size"} <= set(shapes):
        nbytes = stored.to_numpy(float)
        return col("world_size"), np.where(np.isfinite(nbytes), nbytes, col("elements") * word)
    return None


# ops that move data between cores' on-chip memories over the NoC (ttnn's L1-sharded to
# L1-sharded reshard): no byte of theirs crosses DRAM, so the DRAM roof does not bound them
ON_CHIP_MOVES = ("reshard",)


def _on_chip_move(rows: pd.DataFrame, idx: Any, op: str) -> str | None:
    """Leave the rows ``idx`` of an op of :data:`ON_CHIP_MOVES` without a bound, their limiter
    the NoC (communication), as the tt-metal profile source classes reshards; what the notes
    should say. None for other ops."""
    if op not in ON_CHIP_MOVES:
        return None
    rows.loc[idx, "limiter"] = "communication"
    return (f"{op}: L1 to L1 over the NoC, its bytes never reach DRAM: the DRAM bandwidth "
            f"does not bound it and the catalog has no NoC bandwidth: no bound")


# store ops the catalog models under another name: estimate-train-time's optimizer samples
# time an AdamW step over ``params`` parameters (fp32 states), the catalog's adam_step
STANDS_FOR = {"optimizer": ("adam_step", {"params": "n_params"})}


def _stands_for(rows: pd.DataFrame, idx: Any, op: str, pass_: str, shapes: pd.DataFrame,
                dtype: str) -> str | None:
    """The FLOPs and bytes the store lacks for the rows ``idx`` of an op of
    :data:`STANDS_FOR`, from the catalog op it stands for; what the notes should say."""
    from opatlas.ops.batch import batch_counts
    from opatlas.ops.transformer import ADAM_BYTES_PER_PARAM

    if op not in STANDS_FOR:
        return None
    catalog, names = STANDS_FOR[op]
    if not set(names) <= set(shapes):
        return f"{op}: its parameters lack {', '.join(names)}: no bound"
    params = shapes[list(names)].rename(columns=names).assign(dtype=dtype)
    try:
        counts = batch_counts(catalog, params)
    except Exception as exc:  # a shape the catalog refuses: no counts, no bound
        return f"{op}: no bound ({catalog}: {exc})"
    for col, key in (("flops", f"flops_{pass_}"), ("bytes", f"bytes_{pass_}")):
        if key in counts:
            have = rows.loc[idx, col]
            rows.loc[idx, col] = have.where(have.notna(), counts.loc[idx, key])
    return (f"{op}: counted as the catalog's AdamW step ({catalog} over its "
            f"{', '.join(names)} parameters: {ADAM_BYTES_PER_PARAM} bytes per parameter, the "
            f"fp32 parameter, gradient and moments read and written), so its bound is those "
            f"bytes at the memory bandwidth")


def _summary(rows: pd.DataFrame, res: pd.DataFrame, notes: list[str], onchip: float = 0.0
             ) -> dict[str, Any]:
    devices = sorted(res["device"].unique())
    err = rows["error"].abs()
    out: dict[str, Any] = {
        "title": f"{len(rows)} measurements on {', '.join(devices)}",
        "total_time_s": float(rows["time_s"].sum()), "total_time_label": "measured (sum)",
        "measurements": len(rows),
        "devices": devices, "notes": notes,
        "utilization": _median_util(rows["util_compute"]),
        "utilization_label": "median FLOP util"}
    if err.notna().any():
        out["estimation_error"] = float(err.median())
        out["estimation_error_label"] = f"median |error| ({_predicted_by(rows[err.notna()])})"
    if len(devices) == 1:
        out["device"] = devices[0]
        flops_s = float(rows["device_peak_flops_s"].iloc[0])
        out["peak_flops_s"] = flops_s if np.isfinite(flops_s) else None  # None: no roofline
        bw = float(rows["device_peak_bytes_s"].iloc[0])
        out["peak_bytes_s"] = bw if np.isfinite(bw) else None  # None: no memory roof
        out["onchip_bytes"] = onchip if onchip > 0 else None  # None: not known
        if _empirical(devices[0]) and np.isfinite(flops_s):
            out["peaks"] = empirical_peaks_text(bool(np.isfinite(bw)))
    return out


def _median_util(util: pd.Series) -> float | None:
    """The median FLOP utilisation of the rows that have one (kernels); None when none has
    (only collectives or reshards: no device roofline applies to them)."""
    values = util.to_numpy(float)
    values = values[np.isfinite(values)]
    return float(np.median(values)) if len(values) else None


def _predicted_by(rows: pd.DataFrame) -> str:
    """What made the predictions the error is of: "held out" (cross-validation), "saved
    models" (--models: not held out), or both."""
    by = set(rows["predicted_by"]) if "predicted_by" in rows else {"held out"}
    if by == {"held out"}:
        return "held out"
    return "saved models" if by == {"saved"} else "saved models; held out where none"


def _empirical(device: str) -> bool:
    from opatlas.devices import find_device

    return find_device(_catalog_name(device)) is None


register(SourceKind("store", detect, read, "an opatlas results store (.duckdb)",
                    uses=frozenset({"device", "models"})))
