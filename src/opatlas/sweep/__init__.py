"""Expand a spec into vectors: cartesian product, validity with reasons, suites and
downsampling, parts, content-hash ids; at once (``expand``) or in batches (``VectorStream``)."""

from opatlas.sweep.expand import (
    Expansion,
    ExpansionBatch,
    Vector,
    VectorStream,
    canonical_json,
    downsample,
    expand,
    in_part,
    params_json,
    vector_id,
)

__all__ = ["Expansion", "ExpansionBatch", "Vector", "VectorStream", "canonical_json", "downsample",
           "expand", "in_part", "params_json", "vector_id"]
