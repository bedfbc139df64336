"""Expand a spec into vectors: cartesian product, validity with reasons, suites and
downsampling, parts, content-hash ids."""

from opatlas.sweep.expand import (
    Expansion,
    Vector,
    canonical_json,
    downsample,
    expand,
    in_part,
    params_json,
    vector_id,
)

__all__ = ["Expansion", "Vector", "canonical_json", "downsample", "expand", "in_part", "params_json",
           "vector_id"]
