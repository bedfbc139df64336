"""The ``Predictor``: models per (op, pass) fitted lazily from the bundled (or given) data,
cached in the model registry, evaluated on whole tables of shapes at once."""

from __future__ import annotations

import warnings
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from opatlas.columns import Columns, as_columns, distinct_rows, is_numeric, n_rows, take
from opatlas.devices import Device, device_key, find_device
from opatlas.errors import InvalidShape, OpatlasError, TooFewRows
from opatlas.fit.index import DataIndex, group_key
from opatlas.fit.recipes import MIN_FIT_ROWS, RECIPE_REVISION, OpModel, make_model
from opatlas.fit.registry import SAVED_ORDER, ModelRegistry

if TYPE_CHECKING:
    import pandas as pd

# opatlas catalog names -> the names the estimate-train-time data uses
ETT_NAMES = {"flash_attention": "flash_atten", "rmsnorm": "RMSlayernorm", "rope": "RoPE",
             "masked_softmax": "ScaledUpperTriangMaskedSoftmax", "residual_add": "res_add",
             "cross_entropy": "parallel_cross_entropy_128"}
LINEAR_ROLES = {"qkv": "linear1", "out": "linear2", "ffn_up": "linear3", "ffn_down": "linear4",
                "vocab": "linear_final"}


class Predictor:
    """Predict op times (µs). ``data``: 'bundled' (A100), a store file, a folder of
    estimate-train-time CSVs or one such CSV; or ``models``: a folder ``opatlas fit --out``
    saved models in (then no data is read).

    ``Predictor.shared(...)`` returns one instance per argument set for the process, so models
    and data load once however many estimates ask."""

    _shared: dict[tuple, Predictor] = {}

    @classmethod
    def shared(cls, device: str = "NVIDIAA100-SXM4-80GB", dtype: str = "fp16",
               recipe: str = "hybrid", data: str | Path = "bundled") -> Predictor:
        key = (device, dtype, recipe, str(data))
        if key not in cls._shared:
            cls._shared[key] = cls(device=device, dtype=dtype, recipe=recipe, data=data)
        return cls._shared[key]

    def __init__(self, device: str = "NVIDIAA100-SXM4-80GB", dtype: str = "fp16",
                 recipe: str = "hybrid", data: str | Path = "bundled",
                 cache_dir: str | Path | None = None, strict: bool = False,
                 models: str | Path | None = None) -> None:
        """``strict``: a shape naming a value the data never measured is an error.
        ``models``: predict with the models saved there (``recipe``'s, or with ``recipe``
        None the first of hybrid, gbm, ett each op has) instead of fitting on ``data``."""
        self.recipe = recipe or "hybrid"
        self.device, self.dtype, self.data_source = device, dtype, models or data
        self.strict = strict
        self._said: set[tuple[str, str]] = set()
        self._said_devices: set[tuple[str, str]] = set()  # outside the catalog, said once
        self.registry = ModelRegistry(cache_dir)
        self.index: DataIndex | SavedModels = \
            SavedModels(Path(models), (recipe,) if recipe else SAVED_ORDER) if models else \
            DataIndex(data)
        self._data: pd.DataFrame | None = None
        self._keys: np.ndarray | None = None
        self._models: dict[tuple[str, str, str, str], OpModel] = {}
        self._params: dict[tuple[str, str, str, str], list[str]] = {}
        self._devices: dict[tuple[str, str], Device] = {}
        self._floors: dict[tuple[str, str], float | None] = {}
        # what the floor and range warnings said, in order: for a JSON answer to carry
        self.notes: list[str] = []

    @property
    def data(self) -> pd.DataFrame:
        if self._data is None:
            if isinstance(self.index, SavedModels):
                raise OpatlasError(f"predicting with the models under {self.data_source}: "
                                   f"there is no data to read")
            self._data = self.index.frame()
        return self._data

    @property
    def device_keys(self) -> np.ndarray:
        """Each data row's device key: any alias of a catalog device matches any other."""
        if self._keys is None:
            from opatlas.fit.data import device_keys

            self._keys = device_keys(self.data).to_numpy()
        return self._keys

    def rows_for(self, device: str, dtype: str) -> np.ndarray:
        """Mask of the data rows measured on ``device`` (under any of its names) in ``dtype``."""
        return (self.device_keys == device_key(device)) & (self.data["dtype"] == dtype).to_numpy()

    def holdings(self) -> list[tuple[str, str]]:
        """The (device key, dtype) pairs the data or the saved models hold."""
        return sorted({tuple(k.split("|")[2:4]) for k in self.index.meta["groups"]})

    def take_only_holding(self, device: str | None, dtype: str | None) -> str | None:
        """Where the device or dtype was not given (None) and the defaults have no data, but
        the data holds one device that agrees with what was given, and on it the default dtype
        or one dtype that agrees: predict on it.
        Returns the note that says so, None when nothing was chosen."""
        if self.index.has_device(device_key(self.device), self.dtype) or \
                (device is not None and dtype is not None):
            return None
        held = self.holdings()
        devices = sorted({d for d, _ in held if device is None or d == device_key(device)})
        if len(devices) != 1:
            return None
        dtypes = [t for d, t in held if d == devices[0] and dtype in (None, t)]
        if dtype is None and self.dtype in dtypes:  # the default dtype, on the one device
            dtypes = [self.dtype]
        if len(dtypes) != 1:
            return None
        self.device, self.dtype = devices[0], dtypes[0]
        what = "device and dtype" if len(held) == 1 else "device"
        return (f"the data holds one {what}: {self.device} {self.dtype}, predicted on "
                f"(--device, --dtype to name them)")

    def check_device(self, device: str | None = None, dtype: str | None = None) -> None:
        """Raise, naming what the data holds, when it has nothing for ``device`` in ``dtype``."""
        device, dtype = device or self.device, dtype or self.dtype
        if not self.index.has_device(device_key(device), dtype):
            check_dtype(dtype)  # a typo (fp17) is named as such, not as missing data
            if isinstance(self.index, SavedModels):
                raise OpatlasError(f"--models {self.data_source}: no model saved for device "
                                   f"{device!r} in {dtype}; it holds models for: "
                                   f"{self.index.meta['holdings']}")
            raise OpatlasError(f"the op data {self.data_source} has no {dtype} samples for "
                               f"device {device!r}; it holds: {self.index.meta['holdings']}. "
                               f"Give data measured on this device (estimate: ops.data; "
                               f"predict and fit: --data), or, in an estimate, use the "
                               f"roofline (ops.mode: analytical, or --analytical)")

    def device_entry(self, device: str, dtype: str) -> Device:
        """The catalog entry, or for an unknown device the roofline its own data attains."""
        key = (device_key(device), dtype)
        if key not in self._devices:  # the data is loaded only for a device the catalog lacks
            dev = find_device(device)
            if dev is None and isinstance(self.index, SavedModels):
                dev = self.index.device(device_key(device), dtype)
            if dev is None:
                from opatlas.fit.data import data_device

                dev = data_device(self.data, device, dtype)  # says what describes it
                self._said_devices.add(key)
            self._devices[key] = dev
        return self._devices[key]

    def ops(self) -> list[str]:
        return sorted(self.op_names)

    @property
    def op_names(self) -> set[str]:
        if not hasattr(self, "_op_names"):
            self._op_names = set(self.index.meta["ops"]) if self._data is None else \
                set(self.data["op"].unique())
        return self._op_names

    def resolve_op(self, op: str, shapes: Columns) -> tuple[str, Columns]:
        if op in self.op_names:
            return op, shapes
        if op == "linear" and "role" not in shapes:
            role = default_linear_role()
            if ("linear", "role") not in self._said:
                self._said.add(("linear", "role"))
                warnings.warn(f"linear: no role given; predicting its default role {role!r}",
                              UserWarning, stacklevel=3)
            shapes = {**shapes, "role": [role] * n_rows(shapes)}
        if op == "linear":
            roles = set(shapes["role"])
            if len(roles) != 1:
                raise OpatlasError("predict one linear role at a time")
            role = str(roles.pop())
            if role not in LINEAR_ROLES:
                raise OpatlasError(f"linear: unknown role {role!r}; one of "
                                   f"{', '.join(LINEAR_ROLES)}")
            rest = {k: v for k, v in shapes.items() if k != "role"}
            return LINEAR_ROLES[role], rest
        name = ETT_NAMES.get(op, op)
        return (name, shapes) if name in self.op_names else self._filed_as(op, shapes)

    def _filed_as(self, op: str, shapes: Columns) -> tuple[str, Columns]:
        """An alias the data has no model of, predicted by the op it files its rows under
        (``linear1`` by a store's ``linear`` with role=qkv; upstream's ``RMSlayernorm`` by the
        catalog's ``rmsnorm``, as the H100 sweep names it), as ``opatlas fit --op`` finds
        them; else ``op`` as it is (its absence is said by the caller)."""
        from opatlas.ops.registry import filed_as, get_op

        candidates = filed_as(op, sorted(self.op_names))
        fixes = set(get_op(op)[1]) if candidates else set()
        for stored, values in candidates:
            if set(get_op(stored)[1]) <= fixes:  # a rename, or data of an op
                # this one narrows (linear for linear1); never one narrower than asked
                n = n_rows(shapes)
                return stored, {**shapes, **{k: [v] * n for k, v in values.items()}}
        return ETT_NAMES.get(op, op), shapes

    def reference_note(self, op: str, shapes: Columns) -> str:
        """How the data's measurements of ``op`` differ from the kernels training stacks run:
        the catalog op's ``reference_note`` where the rows used are filed under the catalog's
        own name (opatlas's implementation measured them: the ``h100`` sweep's unfused
        ``masked_softmax``); empty where they are filed under upstream's names (the bundled
        A100 samples time Megatron-LM's fused ``ScaledUpperTriangMaskedSoftmax``)."""
        from opatlas.ops.registry import get_op

        try:
            note = get_op(op)[0].reference_note
        except OpatlasError:
            return ""
        return note if note and self.resolve_op(op, shapes)[0] == catalog_name(op) else ""

    def model(self, op: str, pass_: str, device: str | None = None, dtype: str | None = None
              ) -> OpModel:
        """The model of (op, pass) on the device and dtype: loaded, cached, or fitted now."""
        model = self._model(op, pass_, device, dtype, fit=True)
        assert model is not None
        return model

    def cached_model(self, op: str, pass_: str, device: str | None = None,
                     dtype: str | None = None) -> OpModel | None:
        """The model if it needs no fit (loaded, or cached for the current data), else None:
        a caller can show progress on the fits still to do."""
        return self._model(op, pass_, device, dtype, fit=False)

    def has_data(self, op: str, pass_: str, device: str | None = None,
                 dtype: str | None = None) -> bool:
        """Whether the data (or the saved models) hold (op, pass) on the device and dtype."""
        return self.index.group(op, pass_, device_key(device or self.device),
                                dtype or self.dtype) is not None

    def _model(self, op: str, pass_: str, device: str | None, dtype: str | None, fit: bool
               ) -> OpModel | None:
        device, dtype = device_key(device or self.device), dtype or self.dtype
        key = (op, pass_, device, dtype)
        if key not in self._models:
            group = self.index.group(op, pass_, device, dtype)
            if group is None:
                self.check_device(device, dtype)
                have = sorted({tuple(k.split("|")[:2]) for k in self.index.meta["groups"]})
                raise OpatlasError(f"no {dtype} {pass_} data for op {op!r} on {device}; data "
                                   f"has {len(have)} (op, pass) pairs, e.g. {have[:6]}")
            self._params[key] = list(group["params"])
            if isinstance(self.index, SavedModels):
                model = self.index.model(op, pass_, device, dtype)
                self._check_catalog(op, uses_counts(model))
                self._check_counts(op, pass_, model, group)
            else:
                self._check_catalog(op, bool(group.get("counted")))
                self._check_rows(op, pass_, device, dtype, group)
                model = self._load_or_fit(op, pass_, device, dtype, group, fit)
            if model is None:
                return None
            self._say_device(device, dtype, model, group)
            self._models[key] = model
        return self._models[key]

    def _say_device(self, device: str, dtype: str, model: OpModel, group: dict) -> None:
        """Say, once per device and dtype, that a device outside the catalog is described by
        its own data, as fitting says it (:func:`opatlas.fit.data.data_device`): a model
        loaded from the cache or a ``--models`` folder rests on that description too."""
        if (device, dtype) in self._said_devices or find_device(device) is not None:
            return
        from opatlas.fit.catalog import unknown_device_note
        from opatlas.fit.data import UnknownDeviceWarning

        self._said_devices.add((device, dtype))
        samples = group.get("device_samples") if isinstance(self.index, SavedModels) else \
            self.index.samples(device, dtype)
        warnings.warn(unknown_device_note(device, model.device.peak(dtype),
                                          model.device.bandwidth, dtype, samples),
                      UnknownDeviceWarning, stacklevel=4)

    def _check_counts(self, op: str, pass_: str, model: OpModel, saved: dict) -> None:
        """Refuse a saved model of a user's op (its ``--ops-module``) whose inputs, the op's
        counts and features at the shapes it was fitted on, differ from what the module loaded
        now gives: it would correct another base, predicting wrong times silently. A model
        saved without those shapes (an older opatlas) is checked by the module's digest and,
        where that changed, loaded with a note (refused when strict)."""
        now = user_op_revision(op)
        if not now or not uses_counts(model) or saved.get("revision") == now:
            return
        fix = (f"fit them again with the module loaded: opatlas fit --data DATA "
               f"--ops-module FILE --out {self.data_source}")
        probe = saved.get("probe")
        if probe is None:
            text = (f"--models {self.data_source}: {op} {pass_} was saved without the counts "
                    f"it was fitted on, and the module defining {op} changed since; if its "
                    f"FLOP or byte counts did, its predictions are wrong: {fix}")
            if self.strict:
                raise OpatlasError(f"{text} (--strict refuses a model it cannot check)")
            if (op, "probe") not in self._said:
                self._said.add((op, "probe"))
                warnings.warn(text, UserWarning, stacklevel=4)
            return
        changed = _probe_changes(op, pass_, model, probe)
        if changed:
            raise OpatlasError(f"--models {self.data_source}: the counts of op {op!r} changed "
                               f"since its {pass_} model was saved ({changed}), so its "
                               f"predictions would be wrong: {fix}")

    def _check_catalog(self, op: str, counted: bool) -> None:
        """Refuse an op of the user's own whose ``--ops-module`` is not loaded: its data
        (``counted``: recorded with its counts) or its saved model (fitted on them) needs its
        defaults and counts, which only its module gives."""
        from opatlas.fit.catalog import in_catalog, module_needed

        if not counted or in_catalog(op):
            return
        why = f"the models under {self.data_source} were fitted on its counts (FLOPs, bytes)" \
            if isinstance(self.index, SavedModels) else \
            f"the op data {self.data_source} holds the counts (FLOPs, bytes) opatlas run " \
            f"recorded of it"
        raise module_needed([op], why)

    def check_rows(self, op: str, pass_: str, device: str | None = None,
                   dtype: str | None = None) -> None:
        """``TooFewRows`` when the data's rows of (op, pass) are too few to fit a model on
        (saved models, and data without the op, pass here: :meth:`model` says why)."""
        device, dtype = device_key(device or self.device), dtype or self.dtype
        group = None if isinstance(self.index, SavedModels) else \
            self.index.group(op, pass_, device, dtype)
        if group is not None:
            self._check_rows(op, pass_, device, dtype, group)

    def _check_rows(self, op: str, pass_: str, device: str, dtype: str, group: dict) -> None:
        """Refuse to fit on fewer rows than ``opatlas fit`` evaluates a model on."""
        rows = group.get("rows", MIN_FIT_ROWS)
        if rows < MIN_FIT_ROWS:
            raise TooFewRows(f"op {op!r} {pass_}: {self.data_source} holds {rows} {dtype} "
                               f"row(s) of it on {device}; a model is fitted on at least "
                               f"{MIN_FIT_ROWS} (as opatlas fit evaluates them): measure "
                               f"more shapes")

    def _load_or_fit(self, op: str, pass_: str, device: str, dtype: str, group: dict,
                     fit: bool = True) -> OpModel | None:
        """The compiled model cached beside the full one (numpy only), else the full model
        (fitted on first use, or None when not ``fit``), whose compiled form is then cached
        for the next process."""
        fingerprint = f"{group['hash']}{user_op_revision(op)}{FIT_ORDER}:r{RECIPE_REVISION}"
        reg_key = (device, dtype, self.recipe, op, pass_)
        fast = self.registry.load_compiled(reg_key, fingerprint)
        if fast is not None:
            return fast
        model = self.registry.load(reg_key, fingerprint)
        if model is None and not fit:
            return None
        if model is None:
            from opatlas.fit.data import shapes_of
            from opatlas.fit.splits import in_canonical_order

            d = self.data
            rows = d[((d["op"] == op) & (d["pass"] == pass_)).to_numpy()
                     & self.rows_for(device, dtype)]
            shapes, y = in_canonical_order(shapes_of(rows), rows["y_us"].to_numpy(float))
            dev = self.device_entry(device, dtype)
            model = make_model(self.recipe, op, pass_, dev, dtype).fit(shapes, y)
            self.registry.save(reg_key, fingerprint, list(shapes.columns), model,
                               self._saved_extra(op, pass_, device, dtype, group, shapes, model))
        compiled = model.compiled_only()
        if compiled is not None:
            self.registry.save_compiled(reg_key, fingerprint, compiled)
            return compiled  # what the next process loads: the same answer to the last digit
        return model

    def _saved_extra(self, op: str, pass_: str, device: str, dtype: str, group: dict,
                     shapes: pd.DataFrame, model: OpModel) -> dict[str, Any]:
        """What a saved model keeps beside it so that ``--models`` predicts without the data:
        its group's parameters, values and ranges, the device's latency floor and (outside
        the catalog) its sample count; for a user's op, the probe of its counts
        (:func:`counts_probe`)."""
        extra: dict[str, Any] = {k: group.get(k) for k in SAVED_GROUP_KEYS}
        extra["floor_us"] = self.index.floor_us(device, dtype)
        if find_device(device) is None:
            extra["device_samples"] = self.index.samples(device, dtype)
        if user_op_revision(op):
            extra["probe"] = counts_probe(op, pass_, shapes, model)
        return extra

    def _floor(self, op: str, pass_: str, times: np.ndarray, device: str | None,
               dtype: str | None) -> tuple[np.ndarray, int]:
        """(``times`` floored at the device's least measured time, how many were below): a
        kernel never takes 0 µs, while a model scaling its roofline base down to a tiny shape,
        below the data's smallest, would predict nearly that."""
        floor = self._floor_us(op, pass_, device_key(device or self.device),
                               dtype or self.dtype)
        if floor is None:
            return times, 0
        low = int((times < floor).sum())
        return (np.maximum(times, floor), low) if low else (times, 0)

    def _say_floor(self, op: str, low: Mapping[str, int], n: int, device: str | None,
                   dtype: str | None) -> None:
        """One warning (once per op) naming every pass floored, ``low``: pass -> how many of
        the ``n`` shapes were below the floor; noted in :attr:`notes` too."""
        if (op, "floor") in self._said:
            return
        self._said.add((op, "floor"))
        device, dtype = device_key(device or self.device), dtype or self.dtype
        floor = self._floor_us(op, next(iter(low)), device, dtype)
        passes = ", ".join(f"{p}: {k} of {n} shapes" if n > 1 else p for p, k in low.items())
        which = "shapes" if n > 1 else "the shape"
        text = (f"{op}: {which} predicted under {floor:g} µs ({passes}), the least time any "
                f"op took in the data on {device} {dtype}: floored there (a kernel takes at "
                f"least its launch; below the data's smallest shapes the model extrapolates)")
        self.notes.append(text)
        warnings.warn(text, OutOfRangeWarning, stacklevel=4)

    def _floor_us(self, op: str, pass_: str, device: str, dtype: str) -> float | None:
        """The latency floor: the data's least time on the device; a saved model's own
        (None for one saved before floors were)."""
        if isinstance(self.index, SavedModels):
            return (self.index.group(op, pass_, device, dtype) or {}).get("floor_us")
        if (device, dtype) not in self._floors:  # a scan of the index: once per device
            self._floors[device, dtype] = self.index.floor_us(device, dtype)
        return self._floors[device, dtype]

    def shape_params(self, op: str, pass_: str = "fwd", device: str | None = None,
                     dtype: str | None = None) -> tuple[list[str], list[str]]:
        """(the parameters the data measured ``op`` at: each shape needs them, the extra ones
        the catalog's counts of the op also take, such as ``ffn`` or ``kv_heads``). They come
        from the data's index: no model is fitted to answer."""
        self._model(op, pass_, device, dtype, fit=False)
        need = self._params[(op, pass_, device_key(device or self.device), dtype or self.dtype)]
        try:
            from opatlas.ops.registry import get_op

            cat, fixed = get_op(op)
            extra = [k for k in (*cat.params, *cat.defaults) if k not in need and k not in fixed]
        except OpatlasError:  # an op outside the catalog: the data's parameters only
            extra = []
        return need, extra

    def shape_defaults(self, op: str, columns: Sequence[str], pass_: str = "fwd",
                       device: str | None = None, dtype: str | None = None) -> dict[str, Any]:
        """The catalog's defaults (``opatlas ops``) of the parameters the data measured ``op``
        at that ``columns`` lacks, such as bmm's ``mp=1``: what a shape may leave out. A
        parameter without a default (and any of an op outside the catalog) stays required."""
        need, _ = self.shape_params(op, pass_, device, dtype)
        from opatlas.ops.registry import get_op

        try:
            cat, fixed = get_op(op)
        except OpatlasError:
            return {}
        return {k: cat.defaults[k] for k in need
                if k not in columns and k in cat.defaults and k not in fixed}

    def check_shape(self, op: str, columns: Sequence[str], pass_: str = "fwd",
                    device: str | None = None, dtype: str | None = None,
                    unknown_ok: bool = True) -> None:
        """Raise, naming the op's parameters, when a shape lacks one the data was measured at
        (or, with ``unknown_ok=False``, names one neither the data nor the catalog knows)."""
        need, extra = self.shape_params(op, pass_, device, dtype)
        missing = [k for k in need if k not in columns]
        unknown = [] if unknown_ok else [k for k in columns if k not in need + extra
                                         and k != "dtype"]
        if missing or unknown:
            problem = "; ".join(p for p in (f"missing {', '.join(missing)}" if missing else "",
                                            f"unknown {', '.join(unknown)}" if unknown else "")
                                if p)
            optional = f" (optional: {', '.join(extra)})" if extra else ""
            raise OpatlasError(f"op {op!r} takes shape parameters {', '.join(need)}{optional}; "
                               f"{problem}{_fixed_by_alias(op, unknown)}")

    def _say_unmeasured(self, op: str, pass_: str, table: Columns, device: str | None,
                        dtype: str | None) -> None:
        """A named value outside the data (``role=vocab`` where only qkv was measured): the
        model extrapolates from the op's counts alone; said once per op and value."""
        group = self.index.group(op, pass_, device_key(device or self.device),
                                 dtype or self.dtype) or {}
        for text in _unmeasured(group.get("categories") or {}, table):
            if (op, text) not in self._said:
                self._said.add((op, text))
                if self.strict:
                    raise OpatlasError(f"{op}: {text}; --strict refuses to extrapolate to it")
                warnings.warn(f"{op}: {text}: the prediction extrapolates from the op's "
                              f"counts (--strict refuses)", UnmeasuredValueWarning, stacklevel=3)

    def outside_range(self, op: str, row: Mapping[str, Any], pass_: str = "fwd",
                      device: str | None = None, dtype: str | None = None,
                      given: Collection[str] | None = None) -> list[str]:
        """Each of ``row``'s numeric parameters outside the values (op, pass) was measured at,
        with that range, e.g. ``l=65,536 (measured 128 to 8,192)``. ``given``: the parameters
        the user gave (None: all of ``row``'s); another (a catalog default filled in, such as
        a qkv linear's ``ffn=0``) counts only where it changes the op's counts at ``row``:
        one that does not is no extrapolation."""
        group = self.index.group(op, pass_, device_key(device or self.device),
                                 dtype or self.dtype) or {}
        out = []
        ranges = group.get("ranges") or {}
        for k, (lo, hi) in ranges.items():
            v = row.get(k)
            if not isinstance(v, int | float) or isinstance(v, bool) or lo <= v <= hi:
                continue
            if given is not None and k not in given and \
                    not self._changes_counts(op, row, k, (lo, hi), dtype):
                continue
            out.append(f"{k}={_value(v)} (measured {_value(lo)} to {_value(hi)})")
        return out + _left_out_by_data(op, row, ranges)

    def _changes_counts(self, op: str, row: Mapping[str, Any], k: str,
                        values: Sequence[float], dtype: str | None) -> bool:
        """Whether setting ``row``'s ``k`` to any of ``values`` changes what a model of ``op``
        reads there: the op's counts (FLOPs, bytes, features) and, for the ett recipe, its
        upstream features. True where they cannot be had (an op outside the catalog, a
        formula failing): such a value is taken to matter."""
        from opatlas.ops.batch import count_columns

        rows = [dict(row), *({**row, k: v} for v in values)]
        try:
            cols = count_columns(op, as_columns(rows), dtype=dtype or self.dtype)
            if self.recipe == "ett":
                from opatlas.columns import to_frame
                from opatlas.fit.features import ett_features

                ett = ett_features(op, to_frame(as_columns(rows)))
                cols = {**cols, **{f"ett_{c}": ett[c].to_numpy(float) for c in ett.columns}}
        except Exception:  # a user's formula may raise anything
            return True
        return any(not np.allclose(np.asarray(v, dtype=float), float(np.asarray(v)[0]),
                                   rtol=1e-12, atol=0.0, equal_nan=True)
                   for v in cols.values())

    def check_range(self, op: str, row: Mapping[str, Any], passes: Sequence[str],
                    device: str | None = None, dtype: str | None = None,
                    given: Collection[str] | None = None) -> None:
        """Say on stderr (an error when strict) which of ``row``'s parameters lie outside the
        data the models of ``passes`` were fitted on, and what the recipe does there: tree
        models (gbm, ett) cannot extrapolate, the hybrid's roofline base scales. ``given``:
        as :meth:`outside_range` takes it."""
        outside = list(dict.fromkeys(
            t for p in passes for t in self.outside_range(op, row, p, device, dtype, given)))
        if not outside:
            return
        what = f"{op}: {', '.join(outside)} outside the data the model was fitted on"
        if self.strict:
            raise OpatlasError(f"{what}; --strict refuses to extrapolate")
        recipe = self.model(op, passes[0], device, dtype).recipe
        if recipe == "hybrid":
            how = ("the hybrid model scales its roofline base (the op's FLOPs and bytes) "
                   "there, at the efficiency learned at the data's edge")
        else:
            how = (f"the {recipe} recipe's trees cannot extrapolate: its prediction stays "
                   f"near the times at the data's edge (the hybrid recipe's roofline base "
                   f"scales with the op's FLOPs and bytes)")
        self.notes.append(f"{what}: {how}")
        warnings.warn(f"{what}: {how} (--strict refuses)", OutOfRangeWarning, stacklevel=2)

    def predict(self, op: str, shapes: pd.DataFrame | Columns | Mapping[str, Any]
                | Sequence[Mapping], *, device: str | None = None, dtype: str | None = None,
                pass_: str = "fwd") -> np.ndarray:
        """Times in µs, one per shape (row): a DataFrame, columns, one shape's mapping of
        values or a sequence of row mappings. A shape ``opatlas predict --shape`` refuses
        (``b=0``, ``mp="2"``, ``dim`` not a multiple of ``mp``...) raises :class:`InvalidShape`."""
        return self.predict_passes(op, shapes, (pass_,), device=device, dtype=dtype)[pass_]

    def predict_passes(self, op: str, shapes: pd.DataFrame | Columns | Mapping[str, Any]
                       | Sequence[Mapping], passes: Sequence[str], *,
                       device: str | None = None, dtype: str | None = None
                       ) -> dict[str, np.ndarray]:
        """:meth:`predict` for each of ``passes``; a floor is said once, in one line naming
        every pass it lifted."""
        out, low, name = {}, {}, op
        for pass_ in passes:
            name, times = self._predict_raw(op, shapes, device, dtype, pass_)
            out[pass_], k = self._floor(name, pass_, times, device, dtype)
            if k:
                low[pass_] = k
        if low:
            self._say_floor(name, low, n_rows(as_columns(shapes)), device, dtype)
        return out

    def _predict_raw(self, op: str, shapes: Any, device: str | None, dtype: str | None,
                     pass_: str) -> tuple[str, np.ndarray]:
        """(the op's name in the data, the model's times before the floor)."""
        name, table = self.resolve_op(op, as_columns(shapes))
        model = self.model(name, pass_, device, dtype)
        self.check_shape(name, list(table), pass_, device, dtype)
        first, codes = distinct_rows(table)
        check_values(name, table, first)
        self._say_unmeasured(name, pass_, table, device, dtype)
        if len(first) == n_rows(table):
            return name, model.predict(table)
        return name, model.predict(take(table, first))[codes]


def catalog_name(op: str) -> str:
    """The catalog op an op name or alias runs (``masked_softmax`` for
    ``ScaledUpperTriangMaskedSoftmax``); the name itself outside the catalog."""
    from opatlas.ops.registry import get_op

    try:
        return get_op(op)[0].name
    except OpatlasError:
        return op


def user_op_revision(op: str) -> str:
    """For a user's op (an ``--ops-module``'s, an entry point's), a digest of the module that
    defines it, part of its cached models' fingerprint: a model fitted under another version
    of its counts (or none: the module not loaded, or failing on arrays) corrects another base
    and is refitted, not trusted. Empty for a built-in op (RECIPE_REVISION covers those) and
    for one outside the catalog."""
    import hashlib
    import sys

    from opatlas.ops.registry import BUILTIN_MODULES, get_op

    try:
        cls = type(get_op(op)[0])
    except OpatlasError:
        return ""
    if cls.__module__ in BUILTIN_MODULES:
        return ""
    path = getattr(sys.modules.get(cls.__module__), "__file__", None)
    try:
        text = Path(path).read_bytes() if path else cls.__qualname__.encode()
    except OSError:
        text = cls.__qualname__.encode()
    return f":u{hashlib.sha256(text).hexdigest()[:12]}"


PROBE_SHAPES = 32  # training shapes a user op's saved model keeps, to check its counts by


def counts_probe(op: str, pass_: str, shapes: pd.DataFrame, model: OpModel) -> dict[str, Any]:
    """Up to :data:`PROBE_SHAPES` of the shapes a user's op was fitted on (spread over them),
    with the model's inputs there: its features and roofline, from the op's counts. Saved
    with the model; :func:`_probe_changes` recomputes them when it is loaded."""
    table = as_columns(shapes)
    first, _ = distinct_rows(table)
    pick = first[np.unique(np.linspace(0, len(first) - 1, min(len(first), PROBE_SHAPES))
                           .astype(np.int64))]
    probe = {k: v[pick].tolist() for k, v in table.items()}
    return {"shapes": probe, "inputs": _model_inputs(op, pass_, probe, model)}


def _model_inputs(op: str, pass_: str, shapes: Mapping[str, Any], model: OpModel
                  ) -> dict[str, list[float]]:
    """The columns of :func:`opatlas.fit.features.feature_columns` the model reads at
    ``shapes`` (its features, and the roofline base a hybrid model scales)."""
    from opatlas.fit.features import feature_columns

    try:
        cols = feature_columns(op, pass_, as_columns(dict(shapes)), model.device, model.dtype)
    except Exception as exc:  # a user's formula may raise anything: other counts, surely
        return {"error": [f"{type(exc).__name__}: {exc}"]}  # type: ignore[dict-item]
    names = [*model.features, "roofline_us"]
    return {k: np.asarray(cols[k], dtype=float).tolist() for k in names if k in cols}


def _probe_changes(op: str, pass_: str, model: OpModel, probe: Mapping[str, Any]) -> str:
    """How the model's inputs at its saved shapes differ now, from the op's counts as its
    module gives them, e.g. ``roofline_us at b=2, dim=64: 1.5 then, 3 now`` (empty: none)."""
    shapes = probe["shapes"]
    then, now = probe["inputs"], _model_inputs(op, pass_, shapes, model)
    if "error" in now:
        return f"they now fail: {now['error'][0]}"
    for k in sorted(set(then) | set(now), key=lambda k: (k != "roofline_us", k)):
        a = np.asarray(then.get(k, []), dtype=float)
        b = np.asarray(now.get(k, []), dtype=float)
        if a.shape != b.shape:
            return f"{k} {'no longer given' if not len(b) else 'new'}"
        differ = ~np.isclose(a, b, rtol=1e-9, atol=0.0, equal_nan=True)
        if differ.any():
            i = int(np.argmax(differ))
            at = ", ".join(f"{p}={_shown(v[i])}" for p, v in shapes.items())
            return f"{k} at {at}: {a[i]:g} then, {b[i]:g} now"
    return ""


def uses_counts(model: OpModel) -> bool:
    """Whether ``model`` predicts from its op's counts (the hybrid's roofline, the gbm's
    analytical features), which the catalog computes from the op."""
    return model.recipe == "hybrid" or "log_flops" in model.features


def _fixed_by_alias(op: str, unknown: Sequence[str]) -> str:
    """Where a shape gives a parameter the alias ``op`` fixes (``linear2``: role out), what it
    fixes and the aliases that fix the others."""
    from opatlas.ops.registry import alias_of, aliases_of

    alias = alias_of(op)
    keys = [k for k in unknown if alias is not None and k in alias[1]]
    if alias is None or not keys:
        return ""
    target, fixed = alias
    said = ", ".join(f"{k}={fixed[k]!r}" for k in keys)
    others = ", ".join(f"{a} ({', '.join(f'{k}={v!r}' for k, v in pre.items())})"
                       for a, pre in aliases_of(target).items() if a != op
                       and any(k in pre for k in keys))
    return (f" ({op} is {target} with {said} fixed; the other values are other ops: "
            f"{others})" if others else f" ({op} is {target} with {said} fixed)")


class UnmeasuredValueWarning(UserWarning):
    """A shape names a value (a linear's role ...) the op was never measured at."""


class OutOfRangeWarning(UserWarning):
    """A shape's parameter lies outside the values the model was fitted on."""


# what a saved model keeps of its data's index group: predicting from it needs no data
SAVED_GROUP_KEYS = ("params", "categories", "ranges", "rows")


class SavedModels:
    """The models ``opatlas fit --out DIR`` saved, standing in for a data index: the ops,
    passes, devices and dtypes they cover, and per model the shape parameters, named values
    and measured ranges its data held (kept in its meta), all read without the data."""

    def __init__(self, root: Path, recipes: tuple[str, ...]) -> None:
        if not root.is_dir():
            raise OpatlasError(f"--models {root}: no such folder (opatlas fit --out DIR saves "
                               f"its models in DIR)")
        self.root, self.recipes = root, recipes
        self.registry = ModelRegistry(root)
        keys = [k for k in self.registry.saved_keys() if k[2] in recipes]
        if not keys:
            raise OpatlasError(f"--models {root}: no saved {' or '.join(recipes)} model in "
                               f"it (opatlas fit --out DIR saves them)")
        per_device: dict[tuple[str, str], set[str]] = {}
        for dev, dtype, _, op, _ in keys:
            per_device.setdefault((dev, dtype), set()).add(op)
        self.meta: dict[str, Any] = {
            "groups": {group_key(op, pass_, dev, dtype): {} for dev, dtype, _, op, pass_ in keys},
            "ops": sorted({k[3] for k in keys}),
            "holdings": "; ".join(f"{dev} {dtype} ({len(ops)} ops)"
                                  for (dev, dtype), ops in sorted(per_device.items()))}
        self._loaded: dict[str, tuple[OpModel, dict[str, Any]]] = {}

    def _load(self, op: str, pass_: str, device_key: str, dtype: str
              ) -> tuple[OpModel, dict[str, Any]] | None:
        key = group_key(op, pass_, device_key, dtype)
        if key not in self.meta["groups"]:
            return None
        if key not in self._loaded:
            found = self.registry.load_saved(device_key, dtype, op, pass_, self.recipes)
            if found is None:
                return None
            model, meta = found
            params = meta.get("params") or [f for f in meta.get("features") or []
                                             if f != "dtype"]
            _, tagged, revision = str(meta.get("data_hash", "")).partition(":u")
            self._loaded[key] = model, {"params": params,
                                        "categories": meta.get("categories") or {},
                                        "ranges": meta.get("ranges") or {},
                                        "rows": meta.get("rows"),
                                        "floor_us": meta.get("floor_us"),
                                        "device_samples": meta.get("device_samples"),
                                        "probe": meta.get("probe"),
                                        "revision": f":u{revision[:12]}" if tagged else ""}
        return self._loaded[key]

    def group(self, op: str, pass_: str, device_key: str, dtype: str) -> dict[str, Any] | None:
        found = self._load(op, pass_, device_key, dtype)
        return None if found is None else found[1]

    def model(self, op: str, pass_: str, device_key: str, dtype: str) -> OpModel:
        found = self._load(op, pass_, device_key, dtype)
        if found is None:
            raise OpatlasError(f"--models {self.root}: no saved model of {op} {pass_} on "
                               f"{device_key} {dtype}")
        return found[0]

    def has_device(self, device_key: str, dtype: str) -> bool:
        return any(k.split("|")[2:] == [device_key, dtype] for k in self.meta["groups"])

    def device(self, device_key: str, dtype: str) -> Device | None:
        """The device a saved model of ``device_key`` carries (one outside the catalog is
        described by what its data attained when it was fitted)."""
        for key in self.meta["groups"]:
            op, pass_, dev, dt = key.split("|")
            if (dev, dt) == (device_key, dtype):
                return self.model(op, pass_, dev, dt).device
        return None


def _value(v: float) -> str:
    return f"{v:,.0f}" if float(v).is_integer() else f"{v:g}"


def _unmeasured(categories: Mapping[str, Sequence[str]], table: Columns) -> list[str]:
    out = []
    for key, known in categories.items():
        if key in table:
            new = sorted({str(v) for v in np.asarray(table[key]).tolist()} - set(known))
            if new:
                out.append(f"{key} {', '.join(map(repr, new))} was never measured (the data "
                           f"has {', '.join(known)})")
    return out


def check_dtype(dtype: str, what: str = "dtype") -> None:
    """Raise, listing the known ones, when ``dtype`` (given as ``what``: an option, a key) is
    not a precision the catalog knows."""
    from opatlas.ops.base import DTYPE_BYTES

    if dtype not in DTYPE_BYTES:
        raise OpatlasError(f"{what} {dtype!r}: unknown dtype; known: {', '.join(DTYPE_BYTES)}")


def default_linear_role() -> str:
    """The role the catalog's ``linear`` takes when none is given (``opatlas ops``)."""
    from opatlas.ops.registry import get_op

    return str(get_op("linear")[0].defaults["role"])


def _param_kinds(op: str) -> tuple[set[str], set[str], dict[str, Any]]:
    """(the op's named parameters, taken as text: ``role``, ``stage``...; those taking whole
    numbers: sizes and splits, and what the catalog declares with an int default; the
    catalog's defaults and fixed values). An op outside the catalog: no more than sizes."""
    from opatlas.ops.base import SIZE_PARAMS
    from opatlas.ops.registry import get_op

    try:
        cat, fixed = get_op(ETT_NAMES.get(op, op))
        known = {**cat.defaults, **fixed}
    except OpatlasError:
        known = {}
    named = {k for k, v in known.items() if isinstance(v, str)} | {"role", "dtype"}
    # a float default such as dropout's p=0.1 keeps its parameter fractional
    whole = SIZE_PARAMS | {k for k, v in known.items()
                           if isinstance(v, int) and not isinstance(v, bool)}
    return named, whole, known


# the largest value a shape parameter takes: int64's, in which the op's counts are computed
MAX_VALUE = 2**63 - 1


def number_problem(k: str, num: float, whole: bool, zero_ok: bool = False,
                   shown: str | None = None) -> str | None:
    """What is wrong with ``num`` as the value of parameter ``k`` (None: nothing): numbers are
    finite and ≥ 0, a size or a split > 0 (unless ``zero_ok``: its default 0 means "not
    given"), and ``whole`` ones whole. ``shown``: the value as the user wrote it."""
    from opatlas.ops.base import SIZE_PARAMS

    if not np.isfinite(num) or num < 0:
        least = "> 0 (a size or a split)" if k in SIZE_PARAMS else ">= 0"
        return f"{k} must be a finite number {least}"
    if num > MAX_VALUE:  # the counts, in int64, would wrap to nonsense
        return (f"{k} must be at most {MAX_VALUE:,} (2**63 - 1, the largest whole number "
                f"the counts hold), not {shown if shown is not None else f'{num:g}'}")
    if num == 0 and k in SIZE_PARAMS and not zero_ok:  # no work, or a division by zero
        return f"{k} is a size or a split, it must be > 0"
    if whole and not float(num).is_integer():  # the op would truncate it, unsaid
        return f"{k} takes a whole number, not {shown if shown is not None else f'{num:g}'}"
    return None


# part of a cached model's fingerprint: its rows were put in canonical order before the fit
# (from 2026-11-24 on), so one cached before, in the data's own order, is refitted
FIT_ORDER = ":canonical"


def _left_out_by_data(op: str, row: Mapping[str, Any], ranges: Mapping[str, Any]) -> list[str]:
    """``row``'s parameters the data leaves out (measured only at the catalog's default) that
    it sets to another value, e.g. linear_final's ``vocab=32000 (not in the data: measured
    only at the catalog's default 50257)``: the model never saw their effect."""
    from opatlas.ops.registry import get_op

    try:
        cat, fixed = get_op(op)
    except OpatlasError:
        return []
    out = []
    for k, default in cat.defaults.items():
        v = row.get(k)
        if k in ranges or k in fixed or isinstance(v, bool) or not isinstance(v, int | float):
            continue
        if isinstance(default, int | float) and not isinstance(default, bool) and v != default:
            out.append(f"{k}={_value(v)} (not in the data: measured only at the catalog's "
                       f"default {_value(default)})")
    return out


def parse_shape(op: str, items: Sequence[str]) -> dict[str, Any]:
    """``["mp=2", "b=4", ...]`` (or ``["mp=2,b=4", ...]``) -> a shape: numbers (≥ 0, finite)
    for every parameter except the catalog's named ones (``role``, ``stage``, ...); each
    problem, a parameter given twice too, is one clear error."""
    from opatlas.ops.base import zero_means_not_given

    named, whole, known = _param_kinds(op)
    params: dict[str, Any] = {}
    for item in (part for given in items for part in given.split(",") if part.strip()):
        k, sep, v = (x.strip() for x in item.partition("="))
        if not sep or not k.isidentifier():
            raise OpatlasError(f"--shape {item!r}: expected name=value, e.g. --shape mp=2")
        if k in params:
            raise OpatlasError(f"--shape {item!r}: {k} is given twice ({k}={params[k]} "
                               f"before)")
        if k == "dtype":  # the models are per device and dtype: chosen with --dtype
            raise OpatlasError(f"--shape {item!r}: the dtype is not a shape parameter; give "
                               f"--dtype {v or 'NAME'}")
        if k in named:
            params[k] = v
            continue
        try:
            num = float(v)
        except ValueError:
            raise OpatlasError(f"--shape {item!r}: {k} must be a number") from None
        # a size whose default is 0 ("not given": ffn, kv_heads, head_dim) takes 0 as that
        if problem := number_problem(k, num, k in whole,
                                     zero_ok=zero_means_not_given(known, k), shown=v):
            raise OpatlasError(f"--shape {item!r}: {problem}")
        params[k] = int(num) if num.is_integer() and abs(num) < 2**53 else num
    return params


def check_values(op: str, table: Columns, first: np.ndarray | None = None) -> None:
    """Raise :class:`InvalidShape` at the first row of ``table`` that ``opatlas predict
    --shape`` would refuse: a number that is infinite, negative, zero for a size (one whose
    catalog default is 0, "not given", excepted) or fractional where whole; or a shape the
    catalog's rules reject (``dim % mp != 0``). NaN is a row leaving the key out (as
    :mod:`opatlas.columns` reads rows), left to the op's default. ``first``: one row per
    distinct shape (the rules run once per shape; the number checks are vectorised)."""
    from opatlas.ops.base import SIZE_PARAMS, zero_means_not_given

    named, whole, known = _param_kinds(op)
    n = n_rows(table)
    numeric = whole | {k for k, v in known.items()
                       if isinstance(v, int | float) and not isinstance(v, bool)}
    for k, values in table.items():
        if k in named:
            continue
        if not is_numeric(values):
            if k not in numeric:  # an op's own text parameter: its model's to judge
                continue
            i = next((i for i, v in enumerate(values)
                      if isinstance(v, bool) or not isinstance(v, int | float | np.number)),
                     None)
            if i is not None:  # "2" is no 2: the CLI's parse_shape refuses it alike
                raise InvalidShape(f"op {op!r}: {_row_name(i, n)}{k}={values[i]!r}: {k} "
                                   f"must be a number, not {type(values[i]).__name__}")
        arr = values.astype(float)
        zero_ok = zero_means_not_given(known, k)
        finite = np.isfinite(arr)
        bad = (~finite & ~np.isnan(arr)) | (arr < 0)  # NaN: a row leaving the key out
        bad |= np.where(finite, arr, 0) > MAX_VALUE
        if k in SIZE_PARAMS and not zero_ok:
            bad |= arr == 0
        if k in whole:
            bad |= np.where(finite, arr, 0) % 1 != 0
        if bad.any():
            i = int(np.argmax(bad))
            problem = number_problem(k, float(arr[i]), k in whole, zero_ok)
            raise InvalidShape(f"op {op!r}: {_row_name(i, n)}{k}={_shown(values[i])}: "
                               f"{problem}")
    rows = np.arange(n) if first is None else np.asarray(first, dtype=np.int64)
    if len(rows) >= VECTOR_RULE_ROWS:  # the rules on whole columns; the suspects row by row
        rows = rows_breaking_rules(op, table, rows)
    for i in rows.tolist():
        row = {k: v[i].item() if hasattr(v[i], "item") else v[i] for k, v in table.items()
               if not (isinstance(v[i], float | np.floating) and np.isnan(v[i]))}
        try:
            check_valid(op, row)
        except OpatlasError as exc:
            raise InvalidShape(f"{_row_name(i, n)}{exc}" if n > 1 else str(exc)) from None


# from this many distinct shapes on, the catalog's rules run on whole columns (below it one
# row at a time costs less than the numpy calls)
VECTOR_RULE_ROWS = 16
# a value beyond this is checked row by row: the rules' products of two such values stay exact
# in int64, as Python's ints are
EXACT_INT = 2**31


def rows_breaking_rules(op: str, table: Columns, rows: np.ndarray) -> np.ndarray:
    """Those of ``rows`` (positions in ``table``, in order) that the catalog's rules for
    ``op`` may reject, for :func:`check_valid` to confirm and name: each rule's predicate
    runs on whole columns (:func:`_rule_on_columns`). Rows it cannot judge there (a NaN, a
    huge value; every row when a predicate evaluates neither elementwise nor per value of a
    column) are kept, so no row the rules reject is missed."""
    from opatlas.ops.base import Op
    from opatlas.ops.registry import get_op

    try:
        cat, fixed = get_op(ETT_NAMES.get(op, op))
    except OpatlasError:
        return rows[:0]
    if type(cat).invalid_reason is not Op.invalid_reason:  # its own test, not rules: per row
        return rows
    sub = take(table, rows)
    unsure = np.zeros(len(rows), dtype=bool)
    for values in sub.values():
        if is_numeric(values):
            arr = values.astype(float)
            unsure |= np.isnan(arr) | (np.abs(arr) >= EXACT_INT)
    sure = {k: v[~unsure] for k, v in sub.items()}
    try:
        full = cat.resolve({**fixed, **sure})
    except OpatlasError:  # a required parameter missing: check_valid passes such a row
        return rows[unsure]
    broken = np.zeros(len(unsure) - int(unsure.sum()), dtype=bool)
    for rule in cat.rules:
        ok = _rule_on_columns(rule.predicate, full, len(broken))
        if ok is None:
            return rows
        broken |= ~ok
    unsure[~unsure] = broken
    return rows[unsure]


# a predicate that reads a column as one value (``not p["head_dim"]``) runs once per distinct
# value of it where it has at most this many, that column a scalar in each run
SPLIT_VALUES = 64
SPLIT_DEPTH = 3


def _rule_on_columns(predicate: Any, full: Mapping[str, Any], m: int, depth: int = 0
                     ) -> np.ndarray | None:
    """The predicate's verdict per row (True: valid) on ``m`` rows of columns, or None when
    it cannot be had that way. A predicate that raises on the columns (a division by zero
    too, which :meth:`Op.invalid_reason` counts as invalid) or gives one answer after reading
    a column runs again per distinct value of the last column it read (:data:`SPLIT_VALUES`
    at most)."""
    params = _Reads(full)
    failed = False
    try:
        with np.errstate(all="raise"):
            ok = predicate(params)
    except Exception:  # split on a column; on scalars, suspect (invalid_reason: invalid)
        ok, failed = None, True
    if isinstance(ok, np.ndarray) and ok.dtype == bool and ok.shape == (m,):
        return ok
    read = [k for k in params.read if isinstance(full.get(k), np.ndarray)]
    if (failed or isinstance(ok, bool | np.bool_)) and not read:
        return np.full(m, not failed and bool(ok))
    if not read or depth >= SPLIT_DEPTH:
        return None
    return _split_on(predicate, full, m, read[-1], depth)


def _split_on(predicate: Any, full: Mapping[str, Any], m: int, key: str, depth: int
              ) -> np.ndarray | None:
    """:func:`_rule_on_columns` run once per distinct value of column ``key``, as a scalar."""
    try:
        values, inverse = np.unique(full[key], return_inverse=True)
    except TypeError:  # values that do not sort (mixed types): judged row by row
        return None
    if len(values) > SPLIT_VALUES:
        return None
    ok = np.empty(m, dtype=bool)
    for j, value in enumerate(values.tolist()):
        rows = inverse.reshape(-1) == j
        part = {k: v[rows] if isinstance(v, np.ndarray) else v for k, v in full.items()}
        part[key] = value
        got = _rule_on_columns(predicate, part, int(rows.sum()), depth + 1)
        if got is None:
            return None
        ok[rows] = got
    return ok


class _Reads(dict):
    """A parameter mapping that records, in order, the keys a rule's predicate reads (all of
    them when it iterates): an answer that holds for every row reads no column."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.read: dict[str, None] = {}

    def _mark(self, *keys: object) -> None:
        for k in keys:
            self.read.pop(str(k), None)  # the last read last
            self.read[str(k)] = None

    def __getitem__(self, key: str) -> Any:
        self._mark(key)
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        self._mark(key)
        return super().get(key, default)

    def __contains__(self, key: object) -> bool:
        self._mark(key)
        return super().__contains__(key)

    def __iter__(self) -> Any:
        self._mark(*super().keys())
        return super().__iter__()

    def keys(self) -> Any:
        self._mark(*super().keys())
        return super().keys()

    def values(self) -> Any:
        self._mark(*super().keys())
        return super().values()

    def items(self) -> Any:
        self._mark(*super().keys())
        return super().items()


def _row_name(i: int, n: int) -> str:
    return f"row {i} of {n}: " if n > 1 else ""


def _shown(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float | np.floating) else str(v)


def check_valid(op: str, params: Mapping[str, Any]) -> None:
    """Raise when the catalog's rules for ``op`` reject the shape (ops outside it pass)."""
    from opatlas.ops.registry import get_op

    try:
        cat, fixed = get_op(ETT_NAMES.get(op, op))
        full = cat.resolve({**fixed, **params})
    except OpatlasError:
        return
    reason = cat.invalid_reason(full)
    if reason is not None:
        shape = ", ".join(f"{k}={v}" for k, v in params.items())
        raise OpatlasError(f"shape {shape} is not valid for op {op!r}: {reason}")
