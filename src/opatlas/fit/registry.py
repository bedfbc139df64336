"""Fitted models on disk, outside the package: the user cache dir (or a given folder). Each
model carries the hash of the data it was fitted on and the library versions; a model whose
data changed is refitted, and one fitted with other library versions is refitted with a
warning (pickled tree models are not portable across versions)."""

from __future__ import annotations

import pickle
import warnings
from collections.abc import Callable
from functools import cache
from importlib.metadata import version
from pathlib import Path
from typing import Any

import platformdirs

from opatlas.atomic import atomic_path, write_atomic

LIBS = ("opatlas", "scikit-learn", "lightgbm", "xgboost-cpu", "numpy")


def library_versions() -> dict[str, str]:
    out = {}
    for lib in LIBS:
        try:
            out[lib] = version(lib)
        except Exception:  # not installed
            out[lib] = "absent"
    return out


@cache
def _opatlas_version() -> str:
    try:
        return version("opatlas")
    except Exception:
        return "absent"


def default_cache_dir() -> Path:
    return Path(platformdirs.user_cache_dir("opatlas")) / "models"


class ModelRegistry:
    def __init__(self, root: str | Path | None = None) -> None:
        self.root = Path(root) if root else default_cache_dir()

    def path(self, *key: str) -> Path:
        safe = [k.replace("/", "_").replace(" ", "") for k in key]
        return self.root.joinpath(*safe[:-1], safe[-1] + ".joblib")

    def compiled_path(self, *key: str) -> Path:
        return self.path(*key).with_suffix(".compiled.pkl")

    def load_compiled(self, key: tuple[str, ...], data_hash: str) -> Any | None:
        """The model's compiled form saved beside it (numpy only: no LightGBM to import), if
        it was made from the same data by this opatlas version; else None."""
        path = self.compiled_path(*key)
        try:
            with path.open("rb") as f:
                saved = pickle.load(f)
        except Exception:  # absent, corrupt or foreign: the full model is used instead
            return None
        meta = saved.get("meta", {}) if isinstance(saved, dict) else {}
        if meta.get("data_hash") != data_hash or meta.get("opatlas") != _opatlas_version():
            return None
        return saved.get("model")

    def save_compiled(self, key: tuple[str, ...], data_hash: str, model: Any) -> None:
        doc = {"model": model, "meta": {"data_hash": data_hash, "key": key,
                                        "opatlas": _opatlas_version()}}
        write_atomic(self.compiled_path(*key), pickle.dumps(doc))

    def get_or_fit(self, key: tuple[str, ...], data_hash: str, features: list[str] | None,
                   fit: Callable[[], Any]) -> Any:
        import joblib

        path = self.path(*key)
        if path.exists():
            try:
                saved = joblib.load(path)
                meta = saved["meta"]
                if meta["data_hash"] == data_hash and meta["versions"] == library_versions():
                    return saved["model"]
                if meta["data_hash"] == data_hash:
                    warnings.warn(f"model {path.name} was fitted with {meta['versions']}; "
                                  f"refitting with {library_versions()}", stacklevel=2)
            except Exception as exc:  # a corrupt or foreign file is replaced, never trusted
                warnings.warn(f"model {path} unreadable ({exc}); refitting", stacklevel=2)
        model = fit()
        with atomic_path(path) as tmp:
            joblib.dump({"model": model, "meta": {"data_hash": data_hash, "features": features,
                                                  "versions": library_versions(), "key": key}},
                        tmp)
        return model
