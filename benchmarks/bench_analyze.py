"""Analyzer: a 100k-event profiler trace (goal ≤ 10 s and ≤ 2 GB), and the best layout of a
64-GPU search (llama2-7b's 1,728 layouts, llemma_7b_4_2_2_P's 984), each analysed in process;
peak memory is measured in a fresh child process doing the same."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from opatlas.analyze import api
from opatlas.analyze.synthetic import synthetic_trace
from opatlas.estimate import load_config, search

EVENTS = 100_000


def _peak_rss_mb(source: str) -> float:
    code = ("import resource, sys\nfrom opatlas.analyze import api\n"
            f"api.analyze({source!r})\n"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def test_trace_of_100k_events(benchmark, tmp_path):
    path = tmp_path / "trace.json"
    truth = synthetic_trace(path, EVENTS)
    a = benchmark.pedantic(lambda: api.analyze(path), rounds=3, iterations=1)
    assert abs(a.total_time_s - truth["busy_us"] * 1e-6) < 1e-9 * a.total_time_s
    benchmark.extra_info.update(events=truth["events"], rows=len(a.rows),
                                file_mb=path.stat().st_size / 2**20,
                                peak_rss_mb=_peak_rss_mb(str(path)))


@pytest.mark.parametrize("name", ["llama2-7b", "llemma_7b_4_2_2_P"])
def test_best_layout_of_the_search(benchmark, tmp_path, name):
    cfg = load_config(name)
    best, n, _ = search(cfg, 64, 1)
    path = tmp_path / "best.yml"
    path.write_text(yaml.safe_dump(best[0].config.model_dump()))
    a = benchmark.pedantic(lambda: api.analyze(path), rounds=3, iterations=1)
    assert abs(a.total_time_s - best[0].step_time_s) < 1e-9 * best[0].step_time_s
    benchmark.extra_info.update(layouts=n, rows=len(a.rows), blocks=len(a.summary["timeline"]),
                                step_time_s=a.total_time_s, peak_rss_mb=_peak_rss_mb(str(path)))


def test_the_bundled_a100_store_as_a_command(benchmark, tmp_path):
    """What a user waits for: ``opatlas analyze`` on the bundled A100 samples imported whole
    (102,920 rows: 5-fold held-out fits of every op, 18,007 distinct GEMMs' Orojenesis
    bounds), as a process, cold model caches; one round (minutes)."""
    store = tmp_path / "a100.duckdb"
    subprocess.run([sys.executable, "-m", "opatlas", "import", "ett-samples", "bundled",
                    "--store", str(store)], check=True, capture_output=True)
    out = tmp_path / "rows.csv"

    def run() -> None:
        subprocess.run([sys.executable, "-m", "opatlas", "analyze", str(store), "--csv",
                        str(out)], check=True, capture_output=True)

    benchmark.pedantic(run, rounds=1, iterations=1)
    benchmark.extra_info.update(rows=sum(1 for _ in out.open()) - 1)
