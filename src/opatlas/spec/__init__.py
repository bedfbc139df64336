"""Sweep specs: parse and validate at the boundary (``SweepSpec``, ``ParamRange``, ``load_spec``).

Two YAML dialects load into the same ``SweepSpec``:

* opatlas' own (``op:``, ``params:``, ``constraints:`` ...), see ``examples/specs/``;
* estimate-train-time's kernel-sampling configs, unchanged (``kernel_name``, ``columns_name``,
  ``first_n_column``, ``starts``/``steps``/``ends``/``operators`` ...).
"""

from opatlas.spec.loader import load_spec, resolve_spec, spec_from_mapping
from opatlas.spec.model import ParamRange, SweepSpec

__all__ = ["ParamRange", "SweepSpec", "load_spec", "resolve_spec", "spec_from_mapping"]
