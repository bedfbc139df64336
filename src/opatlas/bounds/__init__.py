"""Data-movement bounds (Orojenesis, ISCA'24): for any on-chip buffer size, the minimum
backing-store traffic of an Einsum over the two-level mapspace, computed exactly; plus fusion
of Einsum chains and roofline bounds."""

from opatlas.bounds.einsum import (
    Einsum,
    Tensor,
    bmm,
    conv,
    from_index_string,
    gbmm,
    gemm,
    gqa_bmm,
    parse_problem,
)
from opatlas.bounds.frontier import Frontier, frontier, pareto_indices

__all__ = ["Einsum", "Frontier", "Tensor", "bmm", "conv", "from_index_string", "frontier",
           "gbmm", "gemm", "gqa_bmm", "pareto_indices", "parse_problem"]
