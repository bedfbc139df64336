"""Compact vector keys: the first 16 bytes of a vector id (sha224 hex), as a numpy ``S16`` array.

A resumed sweep asks "which of these vectors does the store hold already?" for every vector;
a sorted array of keys answers that in 16 bytes per stored vector (a Python set of id strings
costs about 150), so the done set of a million-vector sweep stays small. 128 bits of sha224 make
a false match (a vector skipped as done when it is not) practically impossible.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

KEY_DTYPE = np.dtype("S16")
KEY_HEX_CHARS = 2 * KEY_DTYPE.itemsize


def vector_keys(ids: Iterable[str]) -> np.ndarray:
    """The keys of vector ids (sha224 hex digests), in the same order."""
    return np.array([bytes.fromhex(i[:KEY_HEX_CHARS]) for i in ids], dtype=KEY_DTYPE)


def keys_from_halves(hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """Sorted, unique keys from the two big-endian 64-bit halves of each key (as the store
    reads them, without a Python object per vector)."""
    pairs = np.empty((len(hi), 2), dtype=">u8")  # big-endian: bytes in the id's order
    pairs[:, 0], pairs[:, 1] = hi, lo
    return np.unique(pairs.view(KEY_DTYPE).ravel())


def contains(sorted_keys: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """A boolean mask: which of ``keys`` are in ``sorted_keys`` (sorted and unique)."""
    if not len(sorted_keys) or not len(keys):
        return np.zeros(len(keys), dtype=bool)
    pos = np.minimum(np.searchsorted(sorted_keys, keys), len(sorted_keys) - 1)
    return sorted_keys[pos] == keys
