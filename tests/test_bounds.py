"""Orojenesis bounds: the fast model against a brute-force simulator, closed forms, step
semantics, the seed's GPU measurements, fusion."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import run_cli
from opatlas.bounds import bmm, conv, from_index_string, frontier, gbmm, gemm, parse_problem
from opatlas.bounds import fusion as fu
from opatlas.bounds.gpu_data import seed_points
from opatlas.bounds.mapspace import build_mapspace, divisors
from opatlas.bounds.problems import fig11
from opatlas.bounds.reference import reference_frontier, reference_points
from opatlas.bounds.roofline import einsum_roofline

small = st.integers(1, 8)


def _fast(e, imperfect=False):
    f = frontier(e, imperfect=imperfect)
    return list(zip(f.buffer.tolist(), f.accesses.tolist(), strict=True))


@settings(max_examples=40, deadline=None)
@given(M=st.integers(1, 12), K=small, N=st.integers(1, 12))
def test_gemm_matches_reference_exactly(M, K, N):
    assert _fast(gemm(M, K, N)) == reference_frontier(gemm(M, K, N))


@settings(max_examples=25, deadline=None)
@given(B=st.integers(1, 3), M=st.integers(1, 6), K=st.integers(1, 4), N=st.integers(1, 6))
def test_bmm_matches_reference_exactly(B, M, K, N):
    assert _fast(bmm(B, M, K, N)) == reference_frontier(bmm(B, M, K, N))


@settings(max_examples=25, deadline=None)
@given(R=st.integers(1, 3), S=st.integers(1, 2), P=st.integers(1, 4), Q=st.integers(1, 2),
       C=st.integers(1, 2), K=st.integers(1, 2), ws=st.integers(1, 2), hs=st.integers(1, 2),
       wd=st.integers(1, 2), hd=st.integers(1, 2))
def test_conv_with_strides_and_dilations_matches_reference_exactly(R, S, P, Q, C, K, ws, hs, wd, hd):
    e = conv(R, S, P, Q, C, K, 1, ws, hs, wd, hd)
    assert _fast(e) == reference_frontier(e)


@settings(max_examples=15, deadline=None)
@given(M=st.integers(1, 6), K=st.integers(1, 3), N=st.integers(1, 6), H=st.integers(1, 2),
       G=st.integers(1, 2))
def test_gbmm_matches_reference_exactly(M, K, N, H, G):
    assert _fast(gbmm(M, K, N, H, G)) == reference_frontier(gbmm(M, K, N, H, G))


@settings(max_examples=15, deadline=None)
@given(M=st.integers(1, 7), K=st.integers(1, 5), N=st.integers(1, 7))
def test_imperfect_tiling_matches_reference_and_never_does_worse(M, K, N):
    e = gemm(M, K, N)
    imp = frontier(e, imperfect=True)
    assert _fast(e, imperfect=True) == reference_frontier(e, imperfect=True)
    perfect = frontier(e)
    assert np.all(imp.lookup_many(perfect.buffer) <= perfect.accesses)


def test_mapspace_size_counts_tilings_times_orders():
    for e in (gemm(6, 4, 8), conv(3, 1, 4, 2, 2, 1, 1, 2, 1, 1, 1)):
        ms = build_mapspace(e)
        assert ms.mapping_count() == len(reference_points(e))
    # 3x3 conv of Fig. 12: tilings 2*2*5*5*7*7; Σ (non-unit DRAM loops)! -- an independent count
    e = conv(3, 3, 16, 16, 64, 64)
    count = 0
    for t in itertools.product(*(divisors(n) for n in (3, 3, 16, 16, 64, 64))):
        count += math.factorial(sum(n // x > 1 for n, x in zip((3, 3, 16, 16, 64, 64), t,
                                                                strict=True)))
    assert build_mapspace(e).mapping_count() == count == 656_153  # the artifact's "≈0.66M"


@pytest.mark.parametrize(("M", "K", "N", "oi_max"), [
    (4096, 4096, 4096, 8191 / 3), (8192, 8192, 8192, 5461.0), (16384, 1024, 1024, 992.48)])
def test_gemm_closed_forms(M, K, N, oi_max):
    f = frontier(gemm(M, K, N))
    assert f.algo_min == M * K + K * N + M * N == f.accesses[-1]
    assert f.algo_max == 3 * M * K * N
    assert f.oi()[-1] == pytest.approx(oi_max, abs=0.005)
    assert f.max_effectual_buffer == min(K * N + K + N, M * K + M + K, M * N + M + N)
    assert (f.buffer[0], f.accesses[0]) == (3, 2 * M * N * K + M * N)


def test_fig11_maximal_effectual_buffers_match_the_closed_form():
    for e in fig11():
        M, K, N = e.ranks["M"], e.ranks["K"], e.ranks["N"]
        f = frontier(e)
        assert f.max_effectual_buffer == min(K * N + K + N, M * K + M + K, M * N + M + N)
    assert frontier(gemm(4096, 4096, 4096)).max_effectual_ratio == pytest.approx(0.3335, abs=1e-4)


def test_frontier_is_monotone_and_lookups_are_steps():
    f = frontier(conv(3, 3, 16, 16, 64, 64))
    assert np.all(np.diff(f.buffer) > 0) and np.all(np.diff(f.accesses) < 0)
    for b, a in zip(f.buffer, f.accesses, strict=True):
        assert f.lookup(b) == a
        assert f.lookup(b + 0.5) == a
    for i in range(1, len(f.buffer)):
        assert f.lookup(f.buffer[i] - 1) == f.accesses[i - 1]
    assert f.lookup(f.buffer[0] - 1) is None
    assert f.lookup(1e30) == f.algo_min


def test_cosma_form_for_square_output_tiles():
    # m = n = t, k = 1, output-stationary: accesses = 2MNK/t + MN at buffer t^2 + 2t
    M = K = N = 256
    f = frontier(gemm(M, K, N))
    for t in (4, 16, 64):
        assert f.lookup(t * t + 2 * t) <= 2 * M * N * K // t + M * N


def test_seed_gpu_traffic_lies_above_the_bound():
    f = frontier(gemm(4096, 4096, 4096))  # fp32: 4 bytes a word
    pts = seed_points()
    assert len(pts) == 8
    for _, p in pts.iterrows():
        bound_bytes = 4 * f.lookup(p["l2_bytes"] / 4)
        assert p["dram_bytes"] >= bound_bytes, p.to_dict()


def test_problem_names_are_compatible_with_the_artifact():
    as_conv = parse_problem("Conv(P=256, C=64, K=128)")
    assert as_conv.name == "1_1_256_1_64_128_1_1_1_1_1"  # the artifact's Conv.to_str()
    assert _fast(as_conv) == _fast(gemm(256, 64, 128))
    assert parse_problem("3_3_16_16_64_64_1_2_2_1_1").name == "3_3_16_16_64_64_1_2_2_1_1"
    assert parse_problem("GBMM(M=4096, K=128, N=4096, H=32, G=4)").name == "gbmm_4096_128_4096_32_4"
    e = parse_problem("3_3_16_16_64_64_1_1_1_2_2")  # dilation 2: input width (16-1)+2*(3-1)+1
    assert e.tensor_size("Inputs") == 64 * 20 * 20


def test_general_einsum_equals_gemm():
    a = frontier(from_index_string("mk,kn->mn", {"m": 12, "k": 6, "n": 8}))
    b = frontier(gemm(12, 6, 8))
    assert a.buffer.tolist() == b.buffer.tolist() and a.accesses.tolist() == b.accesses.tolist()


def test_word_size_scales_oi_not_words():
    f1, f2 = frontier(gemm(64, 64, 64)), frontier(gemm(64, 64, 64, word_bytes=2))
    assert f1.accesses.tolist() == f2.accesses.tolist()
    assert np.allclose(f1.oi(), 2 * f2.oi())


def test_fusion_compositions():
    layers = fu.ffn_chain(256, 64, 256)
    unf, unt, til = fu.unfused(layers), fu.untiled_fusion(layers), fu.tiled_fusion(layers)
    singles = [frontier(l.einsum()) for l in layers]
    for b in unf.buffer:
        assert unf.lookup(b) == sum(s.lookup(b) for s in singles)
    assert unf.accesses[-1] == fu.algo_min_unfused(layers)
    assert unt.accesses[-1] == til.accesses[-1] == fu.algo_min_fused(layers)
    assert fu.algo_min_fused(layers) == 64 * 256 * 2 + 256 * 64 * 2
    for c in (unf, unt, til):
        assert np.all(np.diff(c.buffer) > 0) and np.all(np.diff(c.accesses) < 0)
    # FFMT by hand: M1 = 256 row tiles of one row, both weights resident:
    # buffer = 64*256 + 256*64 + max(1*64 + 1*256, 1*256 + 1*64) = 33,088 words
    assert til.lookup(33_088) == fu.algo_min_fused(layers) < unf.lookup(33_088)
    assert til.lookup(33_087) > fu.algo_min_fused(layers)
    # and streaming both weights once per row tile (M1 = 256): 256*(2*16384) + 2*256*64 words
    assert til.accesses[0] == 256 * 2 * 64 * 256 + 2 * 256 * 64
    # at small buffers the template loses to unfused mappings; the envelope takes the best
    best = fu.envelope([unf, til])
    grid = np.geomspace(best.buffer[0], 1e7, 60)
    assert np.all(best.lookup_many(grid) <= np.fmin(unf.lookup_many(grid), til.lookup_many(grid)))
    with pytest.raises(ValueError, match="do not chain"):
        fu.unfused([fu.GemmLayer(4, 4, 8), fu.GemmLayer(4, 4, 8)])


def test_roofline_bound_of_a_large_gemm_is_compute_bound_on_an_h100():
    r = einsum_roofline(gemm(8192, 8192, 8192, word_bytes=2), 50 * 2**20, 989e12, 3.35e12)
    assert r.bottleneck == "compute"
    assert r.time_s == pytest.approx(2 * 8192**3 / 989e12)


def test_cli_json_contract_and_step_lookup(tmp_path):
    out = json.loads(run_cli("bound", "gemm", "64", "32", "16", "--json", check=True).stdout)
    assert set(out) >= {"points", "algo_min", "algo_max", "max_effectual_buffer"}
    bufs = [p["buffer"] for p in out["points"]]
    assert bufs == sorted(bufs) and out["algo_min"] == 64 * 32 + 32 * 16 + 64 * 16
    assert {"buffer", "accesses", "oi", "mapping"} <= set(out["points"][0])
    last = out["points"][-1]
    at = json.loads(run_cli("bound", "gemm", "64", "32", "16", "--json", "--at",
                            str(last["buffer"] - 1), check=True).stdout)
    assert at["accesses"] == out["points"][-2]["accesses"]
    art = tmp_path / "o.csv"
    run_cli("bound", "conv", "3_3_8_8_4_4_1_1_1_1_1", "--artifact-csv", str(art), "--plot",
            str(tmp_path / "p.png"), check=True)
    first = art.read_text().splitlines()[0].split(",")
    assert len(first) == 3 + 2 * 3 + 2 and first[-1] == "None"  # no header
    assert (tmp_path / "p.png").stat().st_size > 1000
    bad = run_cli("bound", "einsum", "mk,kn->mn", "--dims", "m=4")
    assert bad.returncode == 2 and "no size for rank" in bad.stderr


def test_fig14_shares_fig13s_problem_and_its_data_keeps_the_artifacts_oi():
    from opatlas.bounds.figures import first_of_each
    from opatlas.bounds.problems import fig13, fig14

    fr = {"fig13": [frontier(e) for e in fig13()[5:6]],
          "fig14": [frontier(e) for e in fig14()[:1]]}
    assert fr["fig13"][0].einsum.name == fr["fig14"][0].einsum.name == "gbmm_4096_128_4096_32_1"
    (kept,) = first_of_each(fr)
    assert kept is fr["fig13"][0] and kept.einsum.ops_override is None  # Timeloop's count


def test_ffmt_row_tiles_are_every_divisor_of_the_rows():
    """4097 = 17·241 rows: one-row tiles (M1 = 4097) are valid, as for 4096 rows; with both
    weights resident the buffer is ΣW + the largest row panels, 2·4096·1024 + 1024 + 4096."""
    for rows in (4096, 4097):
        til = fu.tiled_fusion([fu.GemmLayer(rows, 1024, 4096), fu.GemmLayer(rows, 4096, 1024)])
        assert til.buffer[-1] == 2 * 4096 * 1024 + 1024 + 4096
        assert til.accesses[-1] == 2 * 4096 * 1024 + 2 * rows * 1024


def test_fusion_command_adds_the_best_of_the_three_schemes(tmp_path):
    out = json.loads(run_cli("bound", "fusion", "--layer", "256,64,256", "--layer",
                             "256,256,64", "--json", check=True).stdout)
    curves = {k: fu.Curve(np.array([p["buffer"] for p in v]),
                          np.array([p["accesses"] for p in v])) for k, v in out["curves"].items()}
    best = curves.pop("best of the three")
    grid = np.geomspace(best.buffer[0], 1e6, 50)
    assert np.array_equal(best.lookup_many(grid),
                          np.fmin.reduce([c.lookup_many(grid) for c in curves.values()]))


def test_a_problem_too_large_for_64_bit_counts_is_refused_not_wrapped(capsys):
    from conftest import cli_in_process, one_error

    with pytest.raises(ValueError, match="too large to count exactly"):
        gemm(2**21, 2**21, 2**21)  # 2·M·N·K + M·N words would wrap past 2^63
    assert frontier(gemm(2**20, 2**20, 2**20)).accesses[0] == 2 * 2**60 + 2**40
    one_error(*cli_in_process(capsys, "bound", "gemm", str(2**40), str(2**40), str(2**40))[::2],
              "too large to count exactly")
    code, out, _ = cli_in_process(capsys, "bound", "gemm", "8", "4", "2", "--at", "7.9")
    assert code == 0 and out.startswith("at 7.9 words: 112 accesses")  # not "at 8 words"
