"""Op times for the estimator: fitted models of measured data where the data has the op,
the roofline (with efficiency factors) elsewhere, or the roofline only (analytical mode).

Data mode never degrades silently: data with nothing for the device (under any of its names)
and dtype is an error naming what the data holds; ops without data fall back to the roofline
with a warning naming them (and a note in the estimate), or an error under ``ops.strict``."""

from __future__ import annotations

import sys
import time
import warnings
from typing import Any

import numpy as np

from opatlas.devices import Device, find_device
from opatlas.errors import InvalidShape, OpatlasError, TooFewRows
from opatlas.ops.batch import count_columns


class RooflineFallbackWarning(UserWarning):
    """Data mode: some ops have no measured data and use the roofline."""


class ReferenceImplementationWarning(UserWarning):
    """Data mode: some ops are timed from measurements of opatlas's own implementation of
    them, which differs from the kernels training stacks run (unfused for fused, a loop for a
    grouped kernel)."""


class RooflineTimes:
    def __init__(self, device: Device, dtype: str, compute_eff: float, memory_eff: float) -> None:
        self.device, self.dtype = device, dtype
        self.ce, self.me = compute_eff, memory_eff

    def __call__(self, op: str, shapes: Any, pass_: str) -> np.ndarray:
        """Seconds per row of ``shapes`` (Columns or a DataFrame)."""
        c = count_columns(op, shapes, dtype=self.dtype)
        flops, nbytes = c[f"flops_{pass_}"], c[f"bytes_{pass_}"]
        return np.maximum(flops / (self.device.peak(self.dtype) * self.ce),
                          nbytes / (self.device.bandwidth * self.me))

    def fallback_notes(self) -> list[str]:
        return []

    def roofline_ops(self) -> frozenset[str]:
        """The "op/pass" names timed by the roofline in place of measured data."""
        return frozenset()


class DataTimes(RooflineTimes):
    """The Predictor's models for ops the data has; the roofline for the others."""

    fits: FitProgress | None = None  # models fitted on first use, shown as they go

    def __init__(self, device: Device, device_name: str, dtype: str, data: str,
                 compute_eff: float, memory_eff: float, strict: bool = False,
                 roofline: tuple[str, ...] = ()) -> None:
        super().__init__(device, dtype, compute_eff, memory_eff)
        from opatlas.predict import Predictor

        self.predictor = Predictor.shared(device=device_name, dtype=dtype, data=data)
        self.predictor.check_device()
        self.strict = strict
        self.by_roofline = frozenset(roofline)  # ops.roofline: timed so whatever the data has
        self.fallbacks: set[str] = set()  # ops the data lacks
        self.too_few: set[str] = set()  # ops with fewer rows than a model is fitted on
        self.asked: set[str] = set()  # "op/pass" timed by the roofline as ops.roofline asks
        self.references: dict[str, str] = {}  # op -> how the data's implementation differs
        self.state_dtype: set[str] = set()  # "op/pass" timed from fp32 optimizer-state data
        self.fits = None

    def __call__(self, op: str, shapes: Any, pass_: str) -> np.ndarray:
        if self.by_roofline and roofline_asked(op, self.by_roofline):
            self.asked.add(f"{op}/{pass_}")
            return super().__call__(op, shapes, pass_)
        try:
            times = self._predict(op, shapes, pass_)
        except TooFewRows:
            self.too_few.add(f"{op}/{pass_}")
            return super().__call__(op, shapes, pass_)
        except InvalidShape:
            raise  # the estimate built a shape no op takes: a defect, not missing data
        except OpatlasError:
            self.fallbacks.add(f"{op}/{pass_}")
            return super().__call__(op, shapes, pass_)
        if op not in self.references:
            from opatlas.columns import as_columns

            self.references[op] = self.predictor.reference_note(op, as_columns(shapes))
        return times

    def _predict(self, op: str, shapes: Any, pass_: str) -> np.ndarray:
        """Seconds per row from the data at the training dtype; an optimizer step the data
        holds only at fp32 (opatlas's ``adam_step`` sweeps file it under its states' dtype,
        which mixed precision keeps in fp32 whatever the training dtype) from that."""
        try:
            return self._predict_at(op, shapes, pass_, None)
        except (TooFewRows, InvalidShape):
            raise
        except OpatlasError as exc:
            if self.dtype == STATE_DTYPE or not _fp32_states(op):
                raise
            try:
                times = self._predict_at(op, shapes, pass_, STATE_DTYPE)
            except OpatlasError:
                raise exc from None
            self.state_dtype.add(f"{op}/{pass_}")
            return times

    def _predict_at(self, op: str, shapes: Any, pass_: str, dtype: str | None) -> np.ndarray:
        self._fit_if_needed(op, shapes, pass_, dtype)
        return self.predictor.predict(op, shapes, pass_=pass_, dtype=dtype) * 1e-6

    def _fit_if_needed(self, op: str, shapes: Any, pass_: str, dtype: str | None = None) -> None:
        """Fit the model of (op, pass) now if the cache lacks it, with progress on stderr;
        nothing when it is cached. Whatever keeps it from a model (no data, too few rows)
        is left to ``predict`` to raise and the caller to handle."""
        from opatlas.columns import as_columns

        if not hasattr(self.predictor, "cached_model"):
            return  # a stand-in predictor (a test's) keeps no models to fit
        try:
            name = self.predictor.resolve_op(op, as_columns(shapes))[0]
            if self.predictor.cached_model(name, pass_, dtype=dtype) is not None:
                return
        except OpatlasError:
            return
        if self.fits is None:
            self.fits = FitProgress(self.predictor)
        try:
            self.fits.fit(name, pass_, dtype)
        except BaseException:
            self.fits.close()  # a live bar left open would garble the error after it
            raise

    def roofline_ops(self) -> frozenset[str]:
        return frozenset(self.fallbacks | self.too_few | self.asked)

    def fallback_notes(self) -> list[str]:
        """One note per op without data (or too little); said on stderr once, or an error
        when strict. The engine asks for them once every op is timed: the fits' progress
        ends here."""
        from opatlas.fit.recipes import MIN_FIT_ROWS

        if self.fits is not None:
            self.fits.close()

        notes = self._reference_notes() + [f"op {x} is timed by the roofline (ops.roofline)"
                                           for x in sorted(self.asked)]
        notes += [f"op {x} is timed from the data's {STATE_DTYPE} measurements (the optimizer's "
                  f"states are {STATE_DTYPE} in mixed precision; the data has no {self.dtype} "
                  f"ones)" for x in sorted(self.state_dtype)]
        if not self.fallbacks and not self.too_few:
            return notes
        where = f"{self.predictor.device} {self.dtype} in {self.predictor.data_source}"
        few = f"fewer than {MIN_FIT_ROWS} measured rows"
        said = "; ".join(
            [f"no measured data for {', '.join(sorted(self.fallbacks))} on {where}"] *
            bool(self.fallbacks) +
            [f"{few} for {', '.join(sorted(self.too_few))} on {where}"] * bool(self.too_few))
        if self.strict:
            raise OpatlasError(f"ops.mode data, strict: {said}; measure them, or drop --strict "
                               f"(ops.strict) to use the roofline for them")
        warnings.warn(f"{said}: the roofline is used for them (--strict makes this an error)",
                      RooflineFallbackWarning, stacklevel=2)
        why = {**{x: "has no measured data" for x in self.fallbacks},
               **{x: f"has {few}" for x in self.too_few}}
        return notes + [f"op {x} {why[x]}; roofline used" for x in sorted(why)]

    def _reference_notes(self) -> list[str]:
        """Ops timed from measurements of opatlas's own implementation, where it differs from
        the kernels training stacks run: said on stderr, or an error when strict."""
        from opatlas.predict.predictor import catalog_name

        refs = {op: note for op, note in sorted(self.references.items()) if note}
        if not refs:
            return []
        where = self.predictor.data_source
        said = "; ".join(f"{op} is timed from {where}'s measurements of opatlas's "
                         f"{catalog_name(op)}, which {note}" for op, note in refs.items())
        fix = f"ops.roofline: [{', '.join(refs)}] times them by the roofline instead"
        if self.strict:
            raise OpatlasError(f"ops.mode data, strict: {said}; {fix}, or drop --strict "
                               f"(ops.strict)")
        warnings.warn(f"{said}: the estimate carries that cost ({fix}; --strict makes this "
                      f"an error)", ReferenceImplementationWarning, stacklevel=3)
        return [f"op {op} is timed from measurements of opatlas's {catalog_name(op)}, which "
                f"{note}" for op, note in refs.items()]


STATE_DTYPE = "fp32"  # mixed precision's optimizer states and master weights


def _fp32_states(op: str) -> bool:
    """Whether ``op`` is an optimizer step (the catalog's ``adam_step``, or an alias of it
    such as upstream's ``middleStage_optimizer``), whose states are fp32 in mixed precision."""
    from opatlas.predict.predictor import catalog_name

    return catalog_name(op) in ("adam_step", "optimizer")


class FitProgress:
    """Models fitted on first use, on stderr: a note once per process, then a bar on a
    terminal (else a line per model) counting them and naming each. How many an estimate
    needs is known only as it asks for them, so the count is of those fitted so far."""

    noted = False  # the note is said once per process, however many estimates fit models

    def __init__(self, predictor: Any) -> None:
        self.predictor = predictor
        self.bar: Any = None

    def fit(self, name: str, pass_: str, dtype: str | None = None) -> None:
        if self.bar is None:
            self._start(name, pass_)
        self.bar.advance("fitted", count=0, detail=f"fitting {name} {pass_}")
        t0 = time.monotonic()
        self.predictor.model(name, pass_, dtype=dtype)
        self.bar.advance("fitted", detail=f"{name} {pass_} in {time.monotonic() - t0:.1f} s")

    def _start(self, name: str, pass_: str) -> None:
        from opatlas.run.progress import Progress

        if not FitProgress.noted:
            FitProgress.noted = True
            pred = self.predictor
            print(f"opatlas: note: ops.mode data: fitting runtime models on first use, one "
                  f"per op and pass the estimate needs (first {name} {pass_}), from the "
                  f"{pred.data_source} data ({pred.device} {pred.dtype}); they are cached in "
                  f"{pred.registry.root} for next time", file=sys.stderr, flush=True)
        self.bar = Progress(None, label="fitting models", unit="models", log_every=1)
        self.bar.__enter__()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
            self.bar = None


def roofline_asked(op: str, names: frozenset[str]) -> bool:
    """Whether ``ops.roofline``'s ``names`` take ``op``: by its own name, or by the catalog op
    it runs (``masked_softmax`` takes ``ScaledUpperTriangMaskedSoftmax``; ``linear`` every
    linear, ``linear1`` only itself)."""
    from opatlas.predict.predictor import catalog_name

    return op in names or catalog_name(op) in names


def device_problem(cluster_device: str, dtype: str, ops: Any, analytical: bool = False
                   ) -> str | None:
    """Why a config's ops cannot be timed on its ``cluster.device``, or None: the roofline
    (ops.mode analytical, or ``analytical`` as --analytical) needs the device in the catalog;
    data mode needs the data to hold samples of it (under any of its names), which then
    describe a device outside the catalog."""
    name = cluster_device.replace(" ", "")
    if analytical or ops.mode != "data":
        if find_device(name) is not None:
            return None
        from opatlas.devices import DEVICES

        how = "--analytical" if analytical else f"ops.mode {ops.mode}"
        return (f"cluster.device {cluster_device!r} is not in the device catalog, which the "
                f"roofline ({how}) needs; known: {', '.join(DEVICES)} (in ops.mode data a "
                f"device is also described by its own samples)")
    from opatlas.predict import Predictor

    pred = Predictor.shared(device=name, dtype=dtype, data=ops.data)
    try:
        pred.check_device()
    except OpatlasError as exc:
        return str(exc)
    return None


def op_times(cluster_device: str, dtype: str, ops: Any) -> tuple[Device, RooflineTimes]:
    """(the device, the op-time source) of a config's ``cluster.device`` and ``ops`` section.
    A device outside the catalog works in data mode: its own data describes it."""
    if (why := device_problem(cluster_device, dtype, ops)) is not None:
        raise OpatlasError(why)
    name = cluster_device.replace(" ", "")
    if ops.mode != "data":
        device = find_device(name)
        assert device is not None  # device_problem says why not
        return device, RooflineTimes(device, dtype, ops.compute_efficiency,
                                     ops.memory_efficiency)
    from opatlas.predict import Predictor

    device = Predictor.shared(device=name, dtype=dtype, data=ops.data).device_entry(name, dtype)
    return device, DataTimes(device, name, dtype, ops.data, ops.compute_efficiency,
                             ops.memory_efficiency, strict=getattr(ops, "strict", False),
                             roofline=tuple(getattr(ops, "roofline", ())))
