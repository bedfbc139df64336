"""The store's memory over a long sweep's writes, in one process, without Ray or a backend.

Writes ``--vectors`` vectors (``add_sweep`` then ``add_vectors``, 20,000 a transaction, as a
sweep is recorded) and ``--passes`` result rows per vector (``add_results``, ``--batch`` rows a
transaction: the Ray driver writes 512), with the store's memory limit set as a sweep sets it
(``OPATLAS_STORE_MEMORY_LIMIT``, 64 MB unless set). Prints the peak RSS (sampled every 0.1 s),
what ``duckdb_memory()`` holds at the end by tag, and the write rates.

Run with another checkout's store on ``PYTHONPATH`` to compare schemas::

    PYTHONPATH=src python benchmarks/store_memory.py --vectors 1000000
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from opatlas.store import SCHEMA_VERSION, ResultRow, Store
from opatlas.sweep import Vector

VECTOR_BATCH = 20_000


class PeakRss(threading.Thread):
    def __init__(self, period: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.period, self.peak = period, 0.0
        self.stop = threading.Event()
        self.proc = psutil.Process()

    def now(self) -> float:
        return self.proc.memory_info().rss / 2**20

    def run(self) -> None:
        while not self.stop.is_set():
            self.peak = max(self.peak, self.now())
            self.stop.wait(self.period)


def vectors(start: int, stop: int) -> list[Vector]:
    return [Vector.make("noop", {"i": i}, i) for i in range(start, stop)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vectors", type=int, default=1_000_000)
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--batch", type=int, default=512, help="result rows per transaction")
    ap.add_argument("--memory-limit", default=None, help="as OPATLAS_STORE_MEMORY_LIMIT")
    ap.add_argument("--store", type=Path, default=None, help="default: a temporary file")
    args = ap.parse_args()
    passes = ("fwd", "bwd", "x", "y")[:args.passes]

    tmp = tempfile.TemporaryDirectory()
    path = args.store or Path(tmp.name) / "mem.duckdb"
    rss = PeakRss()
    rss.start()
    start_mb = rss.now()
    with Store(path) as st:
        st.limit_memory(args.memory_limit)
        t0 = time.monotonic()
        st.add_sweep("sw", "mem", "noop", "bench", "{}")
        vector_s = result_s = 0.0
        for lo in range(0, args.vectors, VECTOR_BATCH):
            batch = vectors(lo, min(lo + VECTOR_BATCH, args.vectors))
            t = time.monotonic()
            st.add_vectors("sw", batch)
            vector_s += time.monotonic() - t
            rows = [ResultRow(vector_id=v.id, op=v.op, params_json=f'{{"i":{v.index}}}',
                              pass_=p, backend="bench-sim", device="bench-sim", dtype="fp32",
                              status="ok", repeats=1, mean_ns=1000.0, std_ns=0.0,
                              median_ns=1000.0, min_ns=1000.0, max_ns=1000.0)
                    for v in batch for p in passes]
            for k in range(0, len(rows), args.batch):
                t = time.monotonic()
                st.add_results(rows[k:k + args.batch])
                result_s += time.monotonic() - t
            done = min(lo + VECTOR_BATCH, args.vectors)
            if done % 100_000 == 0 or done == args.vectors:
                print(f"  {done:>9,} vectors  rss {rss.now():6.0f} MB  peak {rss.peak:6.0f} MB"
                      f"  {time.monotonic() - t0:6.0f} s", file=sys.stderr, flush=True)
        memory = st.con.execute("SELECT tag, memory_usage_bytes FROM duckdb_memory() "
                                "WHERE memory_usage_bytes > 0 ORDER BY 2 DESC").fetchall()
        n_vec, n_res, limit = st.count("vectors"), st.count(), st.memory_limit
    rss.stop.set()
    rss.join()
    n_rows = n_vec + n_res
    print(f"schema {SCHEMA_VERSION}: {n_vec:,} vectors + {n_res:,} results "
          f"(batches of {VECTOR_BATCH:,} vectors, {args.batch} results)")
    print(f"RSS: start {start_mb:,.0f} MB, peak {rss.peak:,.0f} MB; "
          f"memory limit at the end {(limit or 0) / 2**20:,.0f} MB")
    print("duckdb_memory(): " + ", ".join(f"{tag} {b / 2**20:,.0f} MB" for tag, b in memory)
          + f"; total {sum(b for _, b in memory) / 2**20:,.0f} MB")
    print(f"writes: vectors {args.vectors / vector_s:,.0f}/s, results {n_res / result_s:,.0f}/s "
          f"({1000 * result_s / max(1, n_res // args.batch):.1f} ms a {args.batch}-row batch); "
          f"{n_rows:,} rows in {time.monotonic() - t0:,.0f} s")
    print(f"store file {path.stat().st_size / 2**20:,.0f} MB")
    tmp.cleanup()


if __name__ == "__main__":
    main()
