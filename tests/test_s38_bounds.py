"""Session 38: a size check (and progress) before a big exact search; the word size in
``bound fusion --csv``."""

from __future__ import annotations

import io
import json
import re

import numpy as np
import pandas as pd
import pytest

from conftest import cli_in_process, one_error
from opatlas.bounds import bmm, conv, from_index_string, frontier, gbmm, gemm
from opatlas.bounds import fusion as fu
from opatlas.bounds.frontier import (
    DEFAULT_MAX_MAPPINGS,
    TooManyMappings,
    ceil_tile_count,
    divisor_count,
    search_size,
)
from opatlas.bounds.mapspace import TilingSpace, ceil_tiles, divisors
from opatlas.bounds.problems import all_single_einsum_problems
from opatlas.cli import bound_cmd

# -- 1. the size of the search, counted up front ---------------------------------------------

# mk,kn->mn with m=12, k=8, n=6: 6, 4 and 4 divisors, so 6·4·4 = 96 tilings. Tilings with j
# non-unit DRAM loops: the coefficients of (1 + 5x)(1 + 3x)(1 + 3x) = 1 + 11x + 39x² + 45x³
# (5·3 + 5·3 + 3·3 = 39, 5·3·3 = 45), each with j! loop orders: 1 + 11 + 39·2 + 45·6 = 360.
SPEC, DIMS = "mk,kn->mn", "m=12,k=8,n=6"
TILINGS, MAPPINGS = 96, 360


def test_hand_counted_search_size():
    e = from_index_string(SPEC, {"m": 12, "k": 8, "n": 6})
    assert search_size(e) == (TILINGS, MAPPINGS)
    f = frontier(e)
    assert (f.tilings, f.mapspace_size) == (TILINGS, MAPPINGS)


def test_tile_counts_match_the_lists_the_search_walks():
    for n in range(1, 3000):
        assert divisor_count(n) == len(divisors(n)), n
        assert ceil_tile_count(n) == len(ceil_tiles(n)), n
    # ceil(10/f), f = 1..10: 10 5 4 3 2 2 2 2 2 1 -> 6 distinct; 720720 = 2^4·3^2·5·7·11·13
    assert (ceil_tile_count(10), divisor_count(720720)) == (6, 5 * 3 * 2 * 2 * 2 * 2)
    assert divisor_count(2**61) == 62  # counted without listing 2^30.5 candidates


@pytest.mark.parametrize("imperfect", [False, True])
@pytest.mark.parametrize("e", [gemm(24, 36, 60), bmm(4, 12, 6, 18), gbmm(12, 8, 12, 4, 2),
                               conv(3, 1, 12, 4, 6, 8, 2, 2, 1, 1, 2), gemm(1, 30, 12)],
                         ids=lambda e: e.name)
def test_search_size_is_the_spaces_own_count(e, imperfect):
    space = TilingSpace.of(e, imperfect=imperfect)
    assert search_size(e, imperfect=imperfect) == (space.size, space.mapping_count())


def test_default_limit_lets_every_figure_problem_run():
    sizes = [search_size(e)[1] for e in all_single_einsum_problems()]
    assert max(sizes) == 3_483_874  # the GBMM template with G = 32
    assert max(sizes) * 100 < DEFAULT_MAX_MAPPINGS


def test_library_refuses_above_the_limit_and_runs_at_it():
    e = from_index_string(SPEC, {"m": 12, "k": 8, "n": 6})
    with pytest.raises(TooManyMappings) as info:
        frontier(e, max_mappings=MAPPINGS - 1)
    assert (info.value.tilings, info.value.mappings, info.value.limit) == (96, 360, 359)
    assert "360 mappings" in str(info.value) and "359" in str(info.value)
    at, free = frontier(e, max_mappings=MAPPINGS), frontier(e)
    assert at.buffer.tolist() == free.buffer.tolist()
    assert at.accesses.tolist() == free.accesses.tolist() and at.mappings == free.mappings


def test_cli_refuses_with_the_count_and_the_way_on(capsys):
    code, out, err = cli_in_process(capsys, "bound", "einsum", SPEC, "--dims", DIMS,
                                    "--max-mappings", str(MAPPINGS - 1), "--json")
    line = one_error(code, err, "360 mappings", "96 tilings", "limit of 359",
                     "--max-mappings 360")
    assert out == "" and line.count("\n") == 0


def test_cli_with_the_limit_raised_gives_the_same_frontier(capsys):
    code, out, err = cli_in_process(capsys, "bound", "einsum", SPEC, "--dims", DIMS,
                                    "--max-mappings", str(MAPPINGS), "--json")
    assert code == 0, err
    got = json.loads(out)
    want = frontier(from_index_string(SPEC, {"m": 12, "k": 8, "n": 6})).to_json()
    assert got == json.loads(json.dumps(want))
    assert (got["tilings"], got["mapspace_size"]) == (TILINGS, MAPPINGS)
    assert got["points"][-1]["accesses"] == 12 * 8 + 8 * 6 + 12 * 6  # every operand once


def test_cli_default_limit_refuses_a_huge_einsum(capsys):
    # 720 (30 divisors) for a..d, 60 (12) for e..g: 30^4 · 12^3 = 1.4 G tilings
    code, _, err = cli_in_process(capsys, "bound", "einsum", "abcd,cdefg->abefg", "--dims",
                                  "a=720,b=720,c=720,d=720,e=60,f=60,g=60")
    line = one_error(code, err, "1,399,680,000 tilings", f"{DEFAULT_MAX_MAPPINGS:,}",
                     "--max-mappings")
    assert int(re.search(r"covers ([\d,]+) mappings", line)[1].replace(",", "")) == \
        search_size(from_index_string("abcd,cdefg->abefg", dict.fromkeys("abcd", 720)
                                      | dict.fromkeys("efg", 60)))[1]


def test_other_single_einsum_commands_take_the_limit(capsys):
    code, _, err = cli_in_process(capsys, "bound", "gemm", "12", "8", "6",
                                  "--max-mappings", "359")
    one_error(code, err, "360 mappings", "--max-mappings 360")
    code, out, _ = cli_in_process(capsys, "bound", "gemm", "--help")
    assert code == 0 and "--max-mappings" in out
    assert f"default {DEFAULT_MAX_MAPPINGS:,}" in bound_cmd.MaxMappingsOpt.help


# -- progress on stderr, only for long work ----------------------------------------------------

def test_progress_hears_every_chunk_in_order():
    calls: list[tuple[int, int]] = []
    f = frontier(gemm(5040, 5040, 5040), progress=lambda d, t: calls.append((d, t)))
    total = 60**3  # 5040 has 60 divisors
    assert f.tilings == total
    assert calls[0] == (0, total) and calls[-1] == (total, total)
    done = [d for d, _ in calls]
    assert done == sorted(set(done))  # strictly increasing
    assert done[1:-1] == list(range(1 << 15, total, 1 << 15))  # each chunk of 32,768 tilings


def test_cli_progress_goes_to_stderr_only_after_a_moment(capsys, monkeypatch):
    args = ("bound", "gemm", "5040", "5040", "5040", "--json")
    code, quick, err = cli_in_process(capsys, *args)
    assert code == 0 and err == ""  # well under the delay: nothing said
    monkeypatch.setattr(bound_cmd._SearchProgress, "DELAY", 0.0)
    code, out, err = cli_in_process(capsys, *args)
    assert code == 0 and json.loads(out) == json.loads(quick)  # stdout untouched
    lines = err.strip().splitlines()
    assert lines and all("bound 5040_5040_5040" in ln for ln in lines)
    assert "216000/216000=100.00%" in lines[-1]


# -- 2. bound fusion --csv carries the word size -----------------------------------------------

CHAIN = ("--layer", "256,64,256", "--layer", "256,256,64")


def test_fusion_csv_has_word_bytes_and_bytes_on_every_row(capsys):
    code, out, err = cli_in_process(capsys, "bound", "fusion", *CHAIN, "--word-bytes", "2",
                                    "--csv", "-")
    assert code == 0, err
    df = pd.read_csv(io.StringIO(out))
    assert list(df.columns) == ["scheme", "buffer", "accesses", "word_bytes", "buffer_bytes",
                                "accesses_bytes"]
    assert len(df) > 4 and (df["word_bytes"] == 2).all()
    assert (df["buffer_bytes"] == df["buffer"] * df["word_bytes"]).all()
    assert (df["accesses_bytes"] == df["accesses"] * df["word_bytes"]).all()
    layers = [fu.GemmLayer(256, 64, 256), fu.GemmLayer(256, 256, 64)]
    unfused = fu.unfused(layers)
    rows = df[df["scheme"] == "unfused"]
    assert rows["buffer"].tolist() == unfused.buffer.tolist()
    assert rows["accesses_bytes"].tolist() == (2 * unfused.accesses).tolist()


def test_fusion_and_frontier_tables_share_their_byte_columns():
    c = fu.Curve(np.array([3, 10]), np.array([50, 20]), "x")
    frame = fu.curves_frame([c], 4)
    f = frontier(gemm(4, 4, 4, word_bytes=4)).to_frame()
    tail = ["word_bytes", "buffer_bytes", "accesses_bytes"]
    assert list(frame.columns[-3:]) == tail and tail == list(f.columns[4:7])
    assert frame[tail].to_numpy().tolist() == [[4, 12, 200], [4, 40, 80]]
