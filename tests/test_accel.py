"""The accelerator mapper (``opatlas bound accel``): its traffic model against the brute-force
loop-nest simulator, the Orojenesis bound as a floor, and the Simba-like Fig. 24b sweep."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from opatlas.bounds import conv, frontier, gemm
from opatlas.bounds.accel import (
    build_nest,
    sample_mappings,
    tensor_dram_accesses,
    tile_of,
    valid_mask,
)
from opatlas.bounds.accel_report import sweep_buffer_sizes
from opatlas.bounds.arch import Arch, load_arch
from opatlas.bounds.reference import loop_nest_accesses
from opatlas.cli import app, main
from opatlas.errors import SpecError

SIMBA = load_arch("simba")
GEMM4K = gemm(4096, 4096, 4096)


def _simulated(ms, i: int) -> dict[str, int]:
    """Per-tensor DRAM accesses of mapping ``i`` by the iteration-by-iteration simulator."""
    nest, out = ms.nest, {}
    for t in nest.einsum.tensors:
        tile = dict(nest.einsum.ranks)
        sizes = tile_of(ms.factors[i:i + 1], nest.tile_slots[t.name])[0]
        tile.update({r: int(sizes[k]) for k, r in enumerate(nest.ranks)})
        loops = [(nest.ranks[k], int(ms.factors[i, s, k]), int(np.prod(ms.factors[i, s + 1:, k])))
                 for s in nest.above[t.name] for k in ms.orders[s][i]]
        out[t.name] = loop_nest_accesses(nest.einsum, tile, loops)[t.name]
    return out


@pytest.mark.parametrize("problem", [gemm(16, 8, 12), conv(3, 3, 4, 4, 2, 8, 1, 2, 2, 1, 1)])
def test_traffic_matches_the_loop_nest_simulator(problem):
    ms = sample_mappings(problem, SIMBA.with_size("GlobalBuffer", 64), 30, seed=3)
    assert len(ms) == 30
    for i in range(len(ms)):
        assert {t: int(a[i]) for t, a in ms.accesses.items()} == _simulated(ms, i)


def test_hand_mapping_beats_the_bound_at_glb_capacity_because_weights_bypass_it():
    """Golden values by hand: DRAM[K64 N64 M4096] (outermost first), the PE holding a 64×64
    weight tile, 1×64 input and output rows in a 128-byte GlobalBuffer. Weights move once
    (KN), inputs once per N block (64·MK), outputs 2·64·MN − MN."""
    arch = SIMBA.with_size("GlobalBuffer", 128)
    nest = build_nest(GEMM4K, arch)
    names = [s.name for s in nest.slots]
    f = np.ones((1, len(nest.slots), 3), dtype=np.int64)  # ranks M, K, N
    f[0, names.index("MainMemory")] = (4096, 64, 64)
    f[0, names.index("AccumulationBuffer")] = (1, 64, 64)
    orders = {s: np.array([[1, 2, 0]]) for s in nest.ordered}  # K, N, M (M innermost)
    acc = {t.name: int(tensor_dram_accesses(nest, t, f, orders)[0]) for t in GEMM4K.tensors}
    M = K = N = 4096
    assert acc == {"Weights": K * N, "Inputs": 64 * M * K, "Outputs": 2 * 64 * M * N - M * N}
    total = sum(acc.values())
    assert total == 3_221_225_472
    from opatlas.bounds.accel import valid_mask
    assert valid_mask(nest, f)[0]
    bound = frontier(GEMM4K)
    assert total < bound.lookup(128) == 17_196_646_400    # below the bound at the GLB size
    assert total >= bound.lookup(64 + 64 * 64 + 64)        # not below it at its uniform tile


def test_zigzag_best_8kb_mapping_has_the_same_dram_traffic_here():
    """ZigZag 3.9.1 (benchmarks/library_eval/zigzag_eval.py, GlobalBuffer 8 KB) reports
    570,425,344 DRAM accesses for its best dataflow: whole-K weight columns resident in the PE
    weight buffers (16 PEs × 8 lanes = 128 outputs), one input row streamed per output row,
    M innermost at DRAM. The same mapping here gives the same number."""
    arch = SIMBA.with_size("GlobalBuffer", 8192)
    nest = build_nest(GEMM4K, arch)
    names = [s.name for s in nest.slots]
    f = np.ones((1, len(nest.slots), 3), dtype=np.int64)  # ranks M, K, N
    f[0, names.index("MainMemory")] = (4096, 1, 32)
    f[0, names.index("PE.pe")] = (1, 1, 16)
    f[0, names.index("AccumulationBuffer")] = (1, 512, 1)
    f[0, names.index("VectorMAC.reduce")] = (1, 8, 1)
    f[0, names.index("VectorMAC.lanes")] = (1, 1, 8)
    orders = {s: np.array([[2, 1, 0]]) for s in nest.ordered}  # N, K, M (M innermost)
    from opatlas.bounds.accel import valid_mask
    assert valid_mask(nest, f)[0]
    acc = {t.name: int(tensor_dram_accesses(nest, t, f, orders)[0]) for t in GEMM4K.tensors}
    assert acc == {"Weights": 4096 * 4096, "Inputs": 32 * 4096 * 4096, "Outputs": 4096 * 4096}
    assert sum(acc.values()) == 570_425_344


def test_no_mapping_below_the_bound_at_glb_capacity_when_the_glb_keeps_every_tensor():
    """The artifact's check, where it is a theorem: when the swept level is every tensor's
    first on-chip keeper, each mapping's DRAM-facing tile fits in it."""
    levels = [lv.model_copy(update={"keeps": ["Inputs", "Weights", "Outputs"]})
              if lv.name == "GlobalBuffer" else lv for lv in SIMBA.levels]
    arch = SIMBA.model_copy(update={"levels": levels})
    sweep = sweep_buffer_sizes(GEMM4K, arch, mappings=300)
    assert len(sweep.points) == 5 * 300
    assert not sweep.points["below_bound_at_capacity"].any()
    assert (sweep.points["dram_accesses"] >= sweep.points["bound_at_capacity"]).all()


def test_simba_sweep_never_beats_the_bound_at_the_uniform_tile():
    sweep = sweep_buffer_sizes(GEMM4K, SIMBA, mappings=400, search_rounds=4)
    pts = sweep.points
    found = sweep.searched
    assert not found["below_bound_at_tile"].any()
    assert (found["level_used_bytes"] <= found["capacity_bytes"]).all()
    best = sweep.best()
    assert (best["searched_dram_accesses"] <= best["best_dram_accesses"]).all()
    assert sorted(pts["capacity_bytes"].unique()) == [128, 1024, 8192, 65536, 524288]
    assert (pts.groupby("capacity_bytes").size() == 400).all()
    assert not pts["below_bound_at_tile"].any()
    # every mapping under the GLB-capacity bound must hold more than the GLB on chip
    under = pts[pts["below_bound_at_capacity"]]
    assert (under["tile_words"] > under["capacity_bytes"]).all()
    assert (pts["level_used_bytes"] <= pts["capacity_bytes"]).all()
    assert (pts["utilization"] <= 1).all() and (pts["macs_used"] >= 1).all()
    assert list(best["mappings"]) == [400] * 5
    assert (best["best_dram_accesses"] >= GEMM4K.total_operand_size).all()
    gap = best["best_dram_accesses"] / best["bound_at_capacity"] - 1
    np.testing.assert_allclose(best["gap_to_bound"], gap)
    # a mapping that fits a buffer fits a larger one: the search starts from the last size's
    # best, so its best never gets worse as the buffer grows
    assert (np.diff(best.sort_values("capacity_bytes")["searched_dram_accesses"]) <= 0).all()


def test_a_search_started_from_a_smaller_buffers_best_keeps_it():
    from opatlas.bounds.accel_search import local_search

    small = sample_mappings(GEMM4K, SIMBA.with_size("GlobalBuffer", 8192), 400, seed=1)
    best_small = local_search(small, seed=1, rounds=4)
    large = sample_mappings(GEMM4K, SIMBA.with_size("GlobalBuffer", 524288), 3, seed=2)
    assert large.total.min() > best_small.total.min()  # three draws: far from that best
    found = local_search(large, seed=2, rounds=0, start=best_small)
    assert found.total.min() == best_small.total.min()  # still valid, so kept
    assert (np.diff(found.total) >= 0).all() and len(found) <= 32
    too_small = sample_mappings(GEMM4K, SIMBA.with_size("GlobalBuffer", 128), 3, seed=2)
    kept = local_search(too_small, rounds=0, start=best_small)  # what no longer fits: dropped
    assert not valid_mask(too_small.nest, best_small.factors).all()
    assert valid_mask(too_small.nest, kept.factors).all()


def test_two_level_architecture_reproduces_the_orojenesis_frontier():
    """DRAM + one buffer is Orojenesis's own mapspace: drawing every mapping recovers it."""
    arch = Arch.model_validate({"name": "two-level", "levels": [
        {"name": "DRAM", "kind": "memory", "keeps": ["Inputs", "Weights", "Outputs"]},
        {"name": "Buffer", "kind": "memory", "size_bytes": 1e9,
         "keeps": ["Inputs", "Weights", "Outputs"]}]})
    e = gemm(8, 4, 8)
    ms = sample_mappings(e, arch, 10_000, seed=0, max_candidates=200_000)
    tile = tile_of(ms.factors, [1])
    occ = (tile[:, 0] * tile[:, 1] + tile[:, 1] * tile[:, 2] + tile[:, 0] * tile[:, 2])
    from opatlas.bounds.frontier import Curve
    got = Curve.pareto(occ, ms.total)
    f = frontier(e)
    assert got.buffer.tolist() == f.buffer.tolist()
    assert got.accesses.tolist() == f.accesses.tolist()


def test_fewer_valid_mappings_than_asked_is_said():
    sweep = sweep_buffer_sizes(gemm(2, 1, 1), SIMBA, sizes_bytes=[1024], mappings=50)
    assert len(sweep.points) < 50
    assert sweep.notes and f"only {len(sweep.points)} valid" in sweep.notes[0]


def test_cli_accel_json_and_csv(tmp_path):
    out = tmp_path / "m.csv"
    r = CliRunner().invoke(app, ["bound", "accel", "simba", "--problem", "gemm", "256", "256",
                                 "256", "--buffer-sizes", "1,64", "--mappings", "50", "--json",
                                 "--csv", str(out), "--search-rounds", "2"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert [b["capacity_bytes"] for b in data["best"]] == [1024, 65536]
    assert all(b["mappings"] == 50 for b in data["best"])
    assert all(b["searched_dram_accesses"] <= b["best_dram_accesses"] for b in data["best"])
    assert out.read_text().count("\n") == 101


@pytest.mark.parametrize(("args", "needle"), [
    (["simba", "--problem", "gemm", "4", "4"], "gemm takes 3 sizes"),
    (["nope.yaml", "--problem", "gemm", "4", "4", "4"], "no such architecture file"),
    (["simba", "--problem", "gemm", "8", "8", "8", "--buffer-sizes", "x"], "KB values"),
    (["simba", "--problem", "gemm", "8", "8", "8", "--level", "Nope"], "no level"),
])
def test_cli_accel_bad_input_exits_2(args, needle, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["bound", "accel", *args])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_arch_errors_name_file_key_and_value(tmp_path):
    p = tmp_path / "a.yaml"
    p.write_text("name: x\nlevels:\n  - {name: DRAM, kind: memory, keeps: [Inputs]}\n"
                 "  - {name: B, kind: memory, size_bytes: -4, keeps: [Inputs]}\n")
    with pytest.raises(SpecError) as exc:
        load_arch(p)
    msg = str(exc.value)
    assert str(p) in msg and "levels.1.size_bytes" in msg and "-4" in msg
    ok = tmp_path / "b.yaml"
    ok.write_text("name: x\nlevels:\n  - {name: DRAM, kind: memory, keeps: [Inputs]}\n"
                  "  - {name: B, kind: memory, size_bytes: 64, keeps: [Inputs]}\n")
    with pytest.raises(SpecError, match="Weights"):
        build_nest(gemm(4, 4, 4), load_arch(ok))


def test_simba_description_has_a_source_for_every_number():
    assert SIMBA.macs == 1024
    for lv in SIMBA.levels:
        if lv.size_bytes is not None:
            assert "size_bytes" in lv.sources
        if lv.kind == "spatial":
            assert "fanout" in lv.sources
        if lv.bits:
            assert "bits" in lv.sources
    assert SIMBA.level("GlobalBuffer").keeps == ["Inputs", "Outputs"]


def test_min_utilization_keeps_only_busy_arrays():
    sweep = sweep_buffer_sizes(GEMM4K, SIMBA, sizes_bytes=[65536], mappings=100,
                               min_utilization=0.5)
    pts = sweep.points
    assert len(pts) == 100 and (pts["macs_used"] >= 512).all()
    assert (pts["compute_cycles"] == -(-GEMM4K.macs // pts["macs_used"])).all()


def test_fan_out_above_the_first_buffer_multicasts_and_matches_the_simulator():
    """Four chiplets under DRAM, each with a buffer keeping everything: DRAM serves the union
    of the chiplets' tiles (data shared across the fan-out fetched once), as the simulator
    does; the bound holds at the four buffers' total, not at one buffer's size."""
    arch = Arch.model_validate({"name": "chiplets", "levels": [
        {"name": "DRAM", "kind": "memory", "keeps": ["Inputs", "Weights", "Outputs"]},
        {"name": "Chiplet", "kind": "spatial", "dims": [{"name": "c", "fanout": 4}]},
        {"name": "Buffer", "kind": "memory", "size_bytes": 96,
         "keeps": ["Inputs", "Weights", "Outputs"]}]})
    e = gemm(16, 8, 12)
    ms = sample_mappings(e, arch, 60, seed=5)
    assert len(ms) == 60
    for i in range(len(ms)):
        assert {t: int(a[i]) for t, a in ms.accesses.items()} == _simulated(ms, i)
    sweep = sweep_buffer_sizes(e, arch, level="Buffer", sizes_bytes=[32, 96], mappings=60)
    assert not sweep.points["below_bound_at_tile"].any()
    pts = sweep.points
    assert (pts["tile_words"] <= 4 * pts["capacity_bytes"]).all()
    assert (pts["dram_accesses"] >= sweep.frontier.lookup_many(4 * pts["capacity_bytes"])).all()
    assert pts["below_bound_at_capacity"].any()  # one chiplet's size undercounts the chip


def test_fig24b_figure_files(tmp_path):
    from opatlas.bounds.figures import fig24b

    paths = fig24b(tmp_path, mappings=40, search_rounds=1)
    names = [p.name for p in paths]
    assert names == ["fig24b_mappings.csv.gz", "fig24b_best.csv", "fig24b.png"]
    import pandas as pd
    assert len(pd.read_csv(paths[0])) == 5 * 40
    assert len(pd.read_csv(paths[1])) == 5
    assert paths[2].stat().st_size > 20_000


def test_an_arch_rule_over_the_whole_file_does_not_repeat_the_file(tmp_path):
    from opatlas.bounds.arch import load_arch
    from opatlas.errors import SpecError

    bad = tmp_path / "twice.yaml"
    bad.write_text("name: x\nlevels:\n"
                   "  - {name: DRAM, kind: memory, keeps: [Weights, Inputs, Outputs]}\n"
                   "  - {name: DRAM, kind: memory, size_bytes: 1024, "
                   "keeps: [Weights, Inputs, Outputs]}\n")
    with pytest.raises(SpecError) as exc:
        load_arch(bad)
    assert str(exc.value) == (f"In file {bad}: level names must be unique, got "
                              f"['DRAM', 'DRAM']")


def test_an_arch_file_giving_a_key_twice_is_refused(tmp_path):
    from opatlas.bounds.arch import load_arch
    from opatlas.errors import SpecError

    path = tmp_path / "a.yaml"
    path.write_text("name: x\nname: y\n")
    with pytest.raises(SpecError, match=r"key 'name'.*given twice, at lines 1 and 2"):
        load_arch(str(path))
