"""An index of a training data source, built once and kept in the user cache dir: the parsed
rows (Parquet) and, per (op, pass, device, dtype) group, its data hash and shape parameters.

Answering "is my cached model still current?" then needs neither the CSVs parsed nor the
frame loaded: a fingerprint of the source's files (names, sizes, modification times) says
whether the index is fresh, and the index holds each group's hash. A changed source is
re-indexed on next use."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import platformdirs

from opatlas.atomic import atomic_path, write_atomic

# 2: each group lists its named values (categories); 3: repeated shapes merged (as the import
# does), each group's row count and the range of each numeric parameter; 4: a parameter some
# rows of an op leave out is its catalog default (fit.data.with_defaults), in ranges too; 5:
# each group says whether its rows carry recorded counts, and the index what the catalog knew
# of each op (the defaults filled in), so loading an --ops-module re-indexes; 6: each group's
# least measured time (the latency floor of predictions)
INDEX_REVISION = "6"


def _source_path(source: str | Path) -> Path:
    from opatlas.samples import op_data_path

    return op_data_path(source)


def fingerprint(source: str | Path) -> str:
    """Names, sizes and mtimes of the source's files: changes when any file does."""
    path = _source_path(source)
    files = sorted(path.rglob("*.csv")) if path.is_dir() else [path]
    h = hashlib.sha256(INDEX_REVISION.encode())
    for f in files:
        try:
            st = f.stat()
        except OSError:
            continue
        h.update(f"{f}|{st.st_size}|{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:20]


def group_key(op: str, pass_: str, device_key: str, dtype: str) -> str:
    return f"{op}|{pass_}|{device_key}|{dtype}"


def catalog_key(ops: list[str]) -> dict[str, str | None]:
    """What the op catalog knows now of each of ``ops``: the defaults (and values an alias
    fixes) that fill a parameter rows leave out, or None for an op outside it. An index built
    under other knowledge (before or without the ``--ops-module`` that registers a user's op)
    filled, or dropped, other rows: it is rebuilt, not trusted."""
    from opatlas.errors import OpatlasError
    from opatlas.ops.registry import get_op

    out: dict[str, str | None] = {}
    for op in ops:
        try:
            cat, fixed = get_op(op)
        except OpatlasError:
            out[op] = None
            continue
        out[op] = json.dumps({**cat.defaults, **fixed}, sort_keys=True, default=repr)
    return out


def _ranges(shapes: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Per numeric parameter, the least and greatest value measured: predictions outside
    them extrapolate. ``shapes`` have their omitted parameters filled (:func:`_build` does):
    a row without ``mp`` was measured at its default, and counts as such."""
    seen: dict[str, list[float]] = {}
    for s in shapes:
        for k, v in s.items():
            if k != "dtype" and isinstance(v, int | float) and not isinstance(v, bool):
                lo, hi = seen.setdefault(k, [v, v])
                seen[k] = [min(lo, v), max(hi, v)]
    return seen


def _categories(shapes: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Per named (non-numeric) parameter, such as a linear's ``role``, the values measured."""
    seen: dict[str, set[str]] = {}
    for s in shapes:
        for k, v in s.items():
            if k != "dtype" and isinstance(v, str):
                seen.setdefault(k, set()).add(v)
    return {k: sorted(v) for k, v in seen.items()}


def _least_us(rows: Any) -> float | None:
    """The least positive time (µs) among ``rows``: no kernel of theirs took less."""
    y = rows["y_us"].to_numpy(float)
    y = y[np.isfinite(y) & (y > 0)]
    return float(y.min()) if len(y) else None


def _counted(rows: Any) -> bool:
    """Whether ``rows`` carry the counts (FLOPs) ``opatlas run`` recorded: their op was in the
    catalog when measured (:func:`opatlas.fit.data.uncatalogued`)."""
    return bool("flops" in rows and rows["flops"].notna().any())


class DataIndex:
    """The index of one data source (see the module docstring)."""

    def __init__(self, source: str | Path, cache_dir: str | Path | None = None) -> None:
        self.source = source
        root = Path(cache_dir) if cache_dir else \
            Path(platformdirs.user_cache_dir("opatlas")) / "data"
        where = str(_source_path(source).resolve())
        self.dir = root / hashlib.sha256(where.encode()).hexdigest()[:16]
        self._meta: dict[str, Any] | None = None

    @property
    def meta(self) -> dict[str, Any]:
        if self._meta is None:
            self._meta = self._load() or self._build()
        return self._meta

    def _load(self) -> dict[str, Any] | None:
        try:
            meta = json.loads((self.dir / "index.json").read_text())
        except (OSError, ValueError):
            return None
        if meta.get("fingerprint") != fingerprint(self.source) or \
                not (self.dir / "samples.parquet").exists() or \
                meta.get("catalog") != catalog_key(meta.get("ops", [])):
            return None
        return meta

    def _build(self) -> dict[str, Any]:
        from opatlas.fit.data import data_hash, device_keys, holdings, load_op_data
        from opatlas.sweep.expand import fill_omitted

        frame = load_op_data(self.source)
        keys = device_keys(frame)
        groups = {}
        for (op, pass_, dev, dtype), rows in frame.assign(_key=keys).groupby(
                ["op", "pass", "_key", "dtype"], sort=True):
            rows = rows.drop(columns="_key")
            shapes = fill_omitted(op, (json.loads(s) for s in rows["params_json"])).params
            params = sorted({k for s in shapes for k in s} - {"dtype"})
            groups[group_key(op, pass_, dev, dtype)] = {"hash": data_hash(rows),
                                                        "params": params,
                                                        "categories": _categories(shapes),
                                                        "ranges": _ranges(shapes),
                                                        "rows": len(rows),
                                                        "least_us": _least_us(rows),
                                                        "counted": _counted(rows)}
        ops = sorted(map(str, frame["op"].unique()))
        meta = {"fingerprint": fingerprint(self.source), "groups": groups, "ops": ops,
                "catalog": catalog_key(ops), "holdings": holdings(frame)}
        with atomic_path(self.dir / "samples.parquet") as tmp:
            frame.to_parquet(tmp, index=False)
        write_atomic(self.dir / "index.json", json.dumps(meta))
        self._frame = frame
        return meta

    def frame(self):
        """The parsed rows (from the cache when the index is fresh)."""
        import pandas as pd

        meta = self.meta
        if not hasattr(self, "_frame"):
            try:
                self._frame = pd.read_parquet(self.dir / "samples.parquet")
            except Exception:  # the cache went missing under us: parse the source again
                from opatlas.fit.data import load_op_data

                self._frame = load_op_data(self.source)
        del meta
        return self._frame

    def group(self, op: str, pass_: str, device_key: str, dtype: str) -> dict[str, Any] | None:
        return self.meta["groups"].get(group_key(op, pass_, device_key, dtype))

    def has_device(self, device_key: str, dtype: str) -> bool:
        return any(k.split("|")[2:] == [device_key, dtype] for k in self.meta["groups"])

    def _device_groups(self, device_key: str, dtype: str) -> list[dict[str, Any]]:
        return [g for k, g in self.meta["groups"].items()
                if k.split("|")[2:] == [device_key, dtype]]

    def floor_us(self, device_key: str, dtype: str) -> float | None:
        """The least time any op took on the device in ``dtype``: a kernel's launch and
        completion cost at least that much there, so no prediction goes below it."""
        least = [g["least_us"] for g in self._device_groups(device_key, dtype)
                 if g.get("least_us") is not None]
        return min(least, default=None)

    def samples(self, device_key: str, dtype: str) -> int:
        """The rows the data holds of the device in ``dtype`` (all ops and passes)."""
        return sum(int(g.get("rows") or 0) for g in self._device_groups(device_key, dtype))
