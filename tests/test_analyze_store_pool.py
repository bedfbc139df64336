"""A big store's held-out fits run in worker processes, one per core, with progress in rows:
the pool gives the very predictions the in-process loop gives, and the log says what is done."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd

from opatlas.analyze.sources.held_out import Job, predict_all
from opatlas.devices import get_device
from opatlas.run.progress import Progress


def _jobs() -> list[Job]:
    dev, rng = get_device("A100"), np.random.default_rng(3)
    jobs = []
    for k, n in ((0, 60), (1, 40)):
        shapes = pd.DataFrame({"role": "qkv", "mp": 1, "b": rng.integers(1, 9, n),
                               "l": rng.choice([512, 1024, 2048], n),
                               "dim": rng.choice([1024, 2048, 4096], n)})
        work = shapes["b"] * shapes["l"] * shapes["dim"] ** 2
        jobs.append(Job(k, "linear", "fwd", dev, "fp16", shapes,
                        (2e-5 + work * 3e-15 * (1 + 0.05 * rng.random(n))).to_numpy()))
    return jobs


def test_pooled_predictions_are_the_in_process_ones_and_progress_counts_rows():
    jobs = _jobs()
    alone = {j.key: p for j, p, _ in predict_all(jobs, workers=1)}
    log = io.StringIO()
    with Progress(100, label="analyse s.duckdb", unit="rows", interactive=False,
                  log_every=1, stream=log) as bar:
        pooled = {j.key: p for j, p, _ in predict_all(jobs, bar, workers=2, pool_min_rows=0)}
    assert set(pooled) == {0, 1}
    for key, p in alone.items():
        assert np.isfinite(p).all() and len(p) == len(jobs[key])
        np.testing.assert_array_equal(pooled[key], p)  # one thread or two: the same trees
    lines = log.getvalue().splitlines()
    assert len(lines) == 2 and lines[-1].split(" | ")[1] == "100/100=100.00%"
    assert "rows/s" in lines[-1] and "linear fwd" in log.getvalue()


def test_a_small_group_is_said_not_fitted():
    from opatlas.analyze.sources.held_out import MIN_ROWS

    assert MIN_ROWS == 13  # 5 folds: each fits on 4/5 of them, at least MIN_FIT_ROWS (10)
    job = _jobs()[0]
    few = Job("few", "linear", "fwd", job.device, "fp16", job.shapes[:6], job.seconds[:6])
    [(got, pred, notes)] = predict_all([few])
    assert got.key == "few" and np.isnan(pred).all()
    assert notes == ["linear fwd: 6 measured shapes, fewer than 13: no held-out prediction"]


def test_one_buffer_sizes_least_traffic_is_the_frontiers_there():
    """``least_accesses`` (what the analyzer asks per GEMM) equals the full frontier's
    lookup at every buffer size, below the smallest mapping (None) and past the largest."""
    from opatlas.bounds import bmm, frontier, gemm
    from opatlas.bounds.mapspace import TilingSpace
    from opatlas.bounds.prune import least_accesses

    for einsum in (gemm(64, 48, 96, 2), gemm(1000, 7, 360, 2), bmm(6, 32, 24, 40, 2),
                   gemm(2048, 2304, 9216, 2)):
        f = frontier(einsum)
        space = TilingSpace.of(einsum)
        sizes = [1, 2, f.buffer[0] - 1, *f.buffer, f.buffer[-1] * 4,
                 *((f.buffer[:-1] + f.buffer[1:]) // 2)]
        # the large GEMM's 125 sizes take 5 s: a third of them, its ends kept, span it
        for words in sizes if len(sizes) < 100 else sizes[:3] + sizes[3::3] + sizes[-1:]:
            assert least_accesses(space, float(words), chunk=97) == f.lookup(float(words))
    assert least_accesses(TilingSpace.of(gemm(8, 8, 8, 2)), 2.0) is None


def test_the_analyzers_gemm_traffic_is_searched_once_in_a_pool_as_alone():
    from opatlas.analyze import why
    from opatlas.bounds import bmm, frontier, gemm

    peaks = why.Peaks("A100", 312e12, 2e12, 40e6, 2)
    gemms = [[(1, 512, 768, 3072)], None, [(1, 512, 768, 3072), (4, 128, 64, 128)], [],
             [(4, 128, 64, 128)]]
    for gemm_ in ((1, 512, 768, 3072), (4, 128, 64, 128)):  # searched by an earlier test?
        why._TRAFFIC.pop((gemm_, 2, 40e6), None)
    keys = why.unknown_traffic(gemms, peaks)
    assert keys == [((1, 512, 768, 3072), 2, 40e6), ((4, 128, 64, 128), 2, 40e6)]
    why.search_traffic(keys, workers=2, pool_min=0)
    assert why.unknown_traffic(gemms, peaks) == []
    assert why._TRAFFIC[keys[0]] == 2 * frontier(gemm(512, 768, 3072, 2)).lookup(20e6)
    assert why._TRAFFIC[keys[1]] == 2 * frontier(bmm(4, 128, 64, 128, 2)).lookup(20e6)
    rows = why.orojenesis_bytes(gemms, peaks)
    assert rows[0] == why._TRAFFIC[keys[0]] and np.isnan(rows[1]) and np.isnan(rows[3])
    assert rows[2] == why._TRAFFIC[keys[0]] + why._TRAFFIC[keys[1]]


def test_no_gemm_to_search_is_no_work():
    from opatlas.analyze import why

    why.search_traffic([])  # nothing new: no pool, no error
    assert why.unknown_traffic([None, []], why.Peaks("A100", 1.0, 1.0, 40e6)) == []


def test_measurements_faster_than_their_bound_are_said(tmp_path):
    """Rows under their roofline (warm cache, coarse timer) are named in a note, not hidden."""
    import json

    from opatlas.analyze import api
    from opatlas.store import Store
    from opatlas.store.db import ResultRow

    dev = get_device("A100")
    rows = []
    for i, n in enumerate((1, 2, 4, 8) * 3):
        nbytes = 6.0 * 2**20 * n  # read two, write one fp16 tensor of 2^20·n elements
        fast = i == 0  # twice as fast as the bandwidth allows
        seconds = nbytes / dev.bandwidth * (0.5 if fast else 1.3)
        rows.append(ResultRow(f"v{i}", "res_add", json.dumps(
            {"b": n, "l": 1024, "dim": 1024 + i, "dtype": "fp16"}), "fwd", "cuda", "A100",
            "fp16", "ok", repeats=5, median_ns=seconds * 1e9, flops=2.0**20 * n,
            min_bytes=nbytes))
    with Store(tmp_path / "s.duckdb") as st:
        st.add_results(rows)
    a = api.analyze(tmp_path / "s.duckdb")
    assert (a.rows["headroom"] < 1).sum() == 1
    [note] = [n for n in a.summary["notes"] if "faster than their bound" in n]
    assert note.startswith("1 measurement(s) faster than their bound (headroom < 1): "
                           "res_add fwd (1);")
