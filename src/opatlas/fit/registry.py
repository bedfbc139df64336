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


# the recipe a saved model is taken from when a folder holds several: the best first
SAVED_ORDER = ("hybrid", "gbm", "ett")


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

    def load(self, key: tuple[str, ...], data_hash: str) -> Any | None:
        """The model saved under ``key`` if it was fitted on the same data with these library
        versions, else None (one fitted with other versions, or unreadable, is said)."""
        import joblib

        path = self.path(*key)
        if not path.exists():
            return None
        try:
            saved = joblib.load(path)
            meta = saved["meta"]
            if meta["data_hash"] == data_hash and meta["versions"] == library_versions():
                return saved["model"]
            if meta["data_hash"] == data_hash:
                warnings.warn(f"model {path.name} was fitted with {meta['versions']}; "
                              f"refitting with {library_versions()}", stacklevel=3)
        except Exception as exc:  # a corrupt or foreign file is replaced, never trusted
            warnings.warn(f"model {path} unreadable ({exc}); refitting", stacklevel=3)
        return None

    def save(self, key: tuple[str, ...], data_hash: str, features: list[str] | None,
             model: Any, extra: dict[str, Any] | None = None) -> None:
        """Save ``model`` with what :meth:`load` checks; ``extra``: more to keep in its meta
        (what the data held: the shape parameters and their measured ranges)."""
        import joblib

        meta = {"data_hash": data_hash, "features": features, "versions": library_versions(),
                "key": key, **(extra or {})}
        with atomic_path(self.path(*key)) as tmp:
            joblib.dump({"model": model, "meta": meta}, tmp)

    def get_or_fit(self, key: tuple[str, ...], data_hash: str, features: list[str] | None,
                   fit: Callable[[], Any], extra: dict[str, Any] | None = None) -> Any:
        model = self.load(key, data_hash)
        if model is None:
            model = fit()
            self.save(key, data_hash, features, model, extra)
        return model

    def load_saved(self, device: str, dtype: str, op: str, pass_: str,
                   recipes: tuple[str, ...] = SAVED_ORDER
                   ) -> tuple[Any, dict[str, Any]] | None:
        """(model, meta) of a model saved by ``opatlas fit --out DIR`` (this registry's
        layout) for the first of ``recipes`` that has one, else None; read without the data
        it was fitted on. These are the user's own files: loading them runs their pickled
        code, as fitting does."""
        import joblib

        from opatlas.errors import OpatlasError
        from opatlas.fit.recipes import RECIPE_REVISION

        for recipe in recipes:
            path = self.path(device, dtype, recipe, op, pass_)
            if path.exists():
                try:
                    saved = joblib.load(path)
                    model, meta = saved["model"], dict(saved.get("meta") or {})
                except Exception as exc:  # not one of ours, or from other library versions
                    raise OpatlasError(f"{path}: not a model opatlas can read "
                                       f"({type(exc).__name__}: {exc})") from None
                # a model corrects the base its revision computed: another base, wrong times
                _, tagged, revision = str(meta.get("data_hash", "")).rpartition(":r")
                revision = revision if tagged else ""
                if revision != RECIPE_REVISION:
                    raise OpatlasError(
                        f"{path}: fitted by the recipes of revision {revision or '(unknown)'}, "
                        f"this opatlas's are revision {RECIPE_REVISION} (the base a model "
                        f"corrects has changed); fit it again: opatlas fit --data DATA --out "
                        f"{self.root}")
                return model, meta
        return None

    def saved_keys(self) -> list[tuple[str, str, str, str, str]]:
        """(device, dtype, recipe, op, pass) of every model saved here."""
        return sorted(tuple(p.relative_to(self.root).with_suffix("").parts)  # type: ignore[misc]
                      for p in self.root.glob("*/*/*/*/*.joblib"))
