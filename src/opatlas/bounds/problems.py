"""The single-Einsum problems of the artifact's figures (orojenesis_single.ipynb). Their
builders are :mod:`opatlas.bounds.einsum`'s, whose :class:`Einsum` refuses sizes and word
sizes that are not ints >= 1 (bools included)."""

from __future__ import annotations

from opatlas.bounds.einsum import Einsum, bmm, conv, from_index_string, gbmm, gemm, gqa_bmm

__all__ = ["Einsum", "bmm", "conv", "from_index_string", "gbmm", "gemm", "gqa_bmm"]

# -- the artifact's problems --------------------------------------------------------------------

FIG12_CONVS = ("1_1_16_16_64_64_1_1_1_1_1", "3_3_16_16_64_64_1_1_1_1_1",
               "5_5_16_16_64_64_1_1_1_1_1", "3_3_16_16_64_64_1_2_2_1_1",
               "3_3_16_16_64_64_1_1_1_2_2")
FIG12_LEGENDS = ("1x1 conv", "3x3 conv", "5x5 conv", "3x3 conv\nstride 2", "3x3 conv\ndilation 2")


def fig1() -> list[Einsum]:
    return [gemm(16384, 1024, 1024)]


def fig10() -> list[Einsum]:
    """2048³ doubling one of N, K, M in turn up to 8192³ (the notebook's loop)."""
    out, prob = [], [2048, 2048, 2048]
    for i in range(-1, 6):
        if i >= 0:
            prob[2 - (i % 3)] *= 2
        out.append(gemm(*prob))
    return out


def fig11() -> list[Einsum]:
    f = (0.5, 1, 2)
    return [gemm(int(4096 * m), int(4096 * k), int(4096 * n)) for m in f for k in f for n in f]


def fig12() -> list[Einsum]:
    return [conv(*map(int, s.split("_"))) for s in FIG12_CONVS]


# Fig. 14's OI as the notebook draws it: get_compute_size(), 2·H·M·K·N with no first-read
# elision, over every curve (the template's own loops count G too)
FIG14_NOTEBOOK_OPS = 2 * 32 * 4096 * 128 * 4096


def fig13() -> list[Einsum]:
    """GBMM(M=4096, K=4096/H, N=4096, H=2^i) on the artifact's template (G = 1)."""
    return [gbmm(M=4096, K=4096 // 2**i, N=4096, H=2**i) for i in range(8)]


def fig14() -> list[Einsum]:
    """GBMM(M=4096, K=128, N=4096, H=32, G=2^i) on the artifact's template (its loops run
    H·G·M·K·N), each with the template's OI (:func:`~opatlas.bounds.einsum.gbmm`); the
    figure draws the notebook's OI instead, over :data:`FIG14_NOTEBOOK_OPS`."""
    return [gbmm(M=4096, K=128, N=4096, H=32, G=2**i) for i in range(6)]


def fig24() -> list[Einsum]:
    return [gemm(4096, 4096, 4096)]


def with_ops(e: Einsum, ops: int) -> Einsum:
    """``e`` with its OI taken over ``ops`` operations instead of its loops' count."""
    return Einsum(e.name, dict(e.ranks), e.tensors, e.word_bytes, ops_override=ops)


FIGURES = {"fig1": fig1, "fig10": fig10, "fig11": fig11, "fig12": fig12, "fig13": fig13,
           "fig14": fig14, "fig24a": fig24}


def all_single_einsum_problems() -> list[Einsum]:
    seen, out = set(), []
    for make in FIGURES.values():
        for e in make():
            if e.name not in seen:
                seen.add(e.name)
                out.append(e)
    return out
