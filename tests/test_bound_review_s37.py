"""Review s37 of the bounds: lookups refuse what is not a buffer size, frontier() refuses what is
not an Einsum, the problem builders refuse bools and bad word sizes, the CLI's plot is the step
function lookup() answers, and its CSV/JSON say the word size and units."""

from __future__ import annotations

import io
import json

import numpy as np
import pandas as pd
import pytest
from matplotlib.cbook import STEP_LOOKUP_MAP

import opatlas.bounds.einsum as es
from conftest import cli_in_process
from opatlas.bounds import frontier, problems

# GEMM 64³ in 4-byte words. At 100 words on chip, tile M=8, N=8, K=1 (8 + 8 + 64 = 80 words)
# reads A once per N tile (4096·8), B once per M tile (4096·8) and writes C once (2·4096 − 4096
# with first-read elision): 32,768 + 32,768 + 4,096 = 69,632. Every operand once: 3·4096.
AT_100 = 69_632
ALGO_MIN = 3 * 64 * 64
OPS = 2 * 64**3 - 64**2


@pytest.fixture(scope="module")
def f64():
    return frontier(es.gemm(64, 64, 64, word_bytes=4))


# -- 1. lookups take numbers of words only -----------------------------------------------------

def test_lookup_golden_values_and_documented_edges(f64):
    assert f64.lookup(100) == f64.lookup(100.0) == f64.lookup(np.int64(100)) == AT_100
    assert f64.lookup(float("inf")) == f64.lookup(1e30) == ALGO_MIN == f64.algo_min
    below = int(f64.buffer[0]) - 1
    for size in (below, 0, -5, -1e9, float("-inf")):  # below the first point: None, kept
        assert f64.lookup(size) is None
    got = f64.lookup_many([-3, 0, 100, float("inf")])
    assert np.isnan(got[:2]).all() and got[2:].tolist() == [AT_100, ALGO_MIN]


@pytest.mark.parametrize(("bad", "error", "named"), [
    ("big", TypeError, "'big' (str)"),
    ("100", TypeError, "'100' (str)"),  # numeric strings are not numbers here
    (None, TypeError, "None (NoneType)"),
    (True, TypeError, "True (bool)"),
    (np.bool_(False), TypeError, "False"),
    (float("nan"), ValueError, "nan"),
])
def test_lookup_refuses_what_is_not_a_buffer_size(f64, bad, error, named):
    with pytest.raises(error, match="buffer size must be a number of words") as exc:
        f64.lookup(bad)
    assert named in str(exc.value)


@pytest.mark.parametrize(("bad", "error", "named"), [
    ([2, 100, "big"], TypeError, "element 2 is 'big' (str)"),
    (["100"], TypeError, "element 0 is '100' (str)"),
    ([2, None], TypeError, "element 1 is None"),
    ([True, 4], TypeError, "element 0 is True (bool)"),
    ([2.0, float("nan")], ValueError, "element 1 is nan"),
    (np.array([[1.0, 2.0], [3.0, np.nan]]), ValueError, "element [1, 1] is nan"),
])
def test_lookup_many_names_the_bad_element(f64, bad, error, named):
    with pytest.raises(error, match="buffer sizes must be numbers of words") as exc:
        f64.lookup_many(bad)
    assert named in str(exc.value)


def test_lookup_many_agrees_with_lookup_on_numbers(f64):
    sizes = [2, 2.5, np.float32(100), 100, 10**6, int(f64.buffer[3])]
    want = [np.nan if f64.lookup(s) is None else f64.lookup(s) for s in sizes]
    assert np.array_equal(f64.lookup_many(sizes), np.array(want, float), equal_nan=True)
    assert f64.lookup_many([]).shape == (0,)


# -- 2. frontier() takes an Einsum ---------------------------------------------------------------

@pytest.mark.parametrize(("bad", "shown"), [("gemm", "'gemm' (str)"), (None, "None (NoneType)"),
                                            ((64, 64, 64), "(64, 64, 64) (tuple)")])
def test_frontier_refuses_what_is_not_an_einsum(bad, shown):
    with pytest.raises(TypeError) as exc:
        frontier(bad)
    assert str(exc.value) == f"frontier() takes an Einsum (e.g. gemm(M, K, N)), got {shown}"


# -- 3. word sizes and dims: ints >= 1, not bools --------------------------------------------------

BUILDERS = {
    "gemm": lambda wb=1, d=64: problems.gemm(d, 64, 64, word_bytes=wb),
    "bmm": lambda wb=1, d=2: problems.bmm(d, 8, 8, 8, word_bytes=wb),
    "gbmm": lambda wb=1, d=8: problems.gbmm(d, 8, 8, 2, 2, word_bytes=wb),
    "gqa_bmm": lambda wb=1, d=8: problems.gqa_bmm(d, 8, 8, 2, 2, word_bytes=wb),
    "conv": lambda wb=1, d=3: problems.conv(d, 3, 8, 8, 4, 4, word_bytes=wb),
    "einsum 'mk,kn->mn'": lambda wb=1, d=4: problems.from_index_string(
        "mk,kn->mn", {"m": d, "k": 4, "n": 4}, word_bytes=wb),
}


@pytest.mark.parametrize("builder", list(BUILDERS))
@pytest.mark.parametrize("word_bytes", [0, -2, 2.5, True, "4", None])
def test_builders_refuse_bad_word_bytes(builder, word_bytes):
    with pytest.raises(ValueError) as exc:
        BUILDERS[builder](wb=word_bytes)
    msg = str(exc.value)
    assert "word_bytes must be an int >= 1" in msg
    assert f"got {word_bytes!r} ({type(word_bytes).__name__})" in msg


@pytest.mark.parametrize("builder", list(BUILDERS))
@pytest.mark.parametrize("dim", [True, 64.5, 0, -1])
def test_builders_refuse_bool_fractional_and_small_dims(builder, dim):
    with pytest.raises(ValueError, match=rf"must be an int >= 1, got {dim!r}"):
        BUILDERS[builder](d=dim)


def test_checked_builders_build_the_same_einsums_as_before():
    assert problems.gemm(64, 32, 16, word_bytes=2) == es.gemm(64, 32, 16, word_bytes=2)
    assert problems.bmm(2, 8, 4, 8, 2) == es.bmm(2, 8, 4, 8, 2)
    assert problems.gbmm(8, 8, 8, 4, 2) == es.gbmm(8, 8, 8, 4, 2)
    assert problems.gqa_bmm(8, 8, 8, 4, 2) == es.gqa_bmm(8, 8, 8, 4, 2)
    assert problems.conv(3, 3, 8, 8, 4, 4, Wstride=2) == es.conv(3, 3, 8, 8, 4, 4, Wstride=2)
    assert problems.gemm(np.int64(8), 8, 8, word_bytes=np.int64(2)).word_bytes == 2
    assert [e.name for e in problems.fig12()] == list(problems.FIG12_CONVS)
    assert [e.name for e in problems.fig13()][-1] == "gbmm_4096_32_4096_128_1"


@pytest.mark.parametrize(("build", "said"), [
    (lambda: es.gemm(64, 64, 64, word_bytes=0), "64_64_64: word_bytes must be an int >= 1"),
    (lambda: es.gemm(64, 64, 64, word_bytes=-2), "got -2 (int)"),
    (lambda: es.gemm(64, 64, 64, word_bytes=2.5), "got 2.5 (float)"),
    (lambda: es.gemm(True, 64, 64), "True_64_64: rank M must be an int >= 1, got True (bool)"),
])
def test_an_einsum_refuses_bad_values_however_it_is_built(build, said):
    """The Einsum checks itself, so no builder can make one with an infinite or negative OI."""
    with pytest.raises(ValueError, match="must be an int >= 1") as exc:
        build()
    assert said in str(exc.value)


# -- 4. the CLI's plot is the step function, and its one-word line in bytes ----------------------

def _drawn_at(line, x: float) -> float:
    """The y the line is drawn at, at ``x``, between vertices as drawn on log-log axes."""
    vx, vy = STEP_LOOKUP_MAP[line.get_drawstyle()](np.asarray(line.get_xdata(), float),
                                                   np.asarray(line.get_ydata(), float))
    return float(np.exp(np.interp(np.log(x), np.log(vx), np.log(vy))))


def _vertical_lines(ax) -> list[float]:
    return sorted(float(ln.get_xdata()[0]) for ln in ax.lines
                  if len(ln.get_xdata()) == 2 and ln.get_xdata()[0] == ln.get_xdata()[1])


def test_cli_plot_draws_the_bound_that_lookup_answers(capsys, tmp_path, figures, f64):
    code, _, err = cli_in_process(capsys, "bound", "gemm", "64", "64", "64", "--word-bytes",
                                  "4", "--plot", str(tmp_path / "g.png"))
    assert code == 0, err
    (fig,) = figures
    ax = fig.axes[0]
    curve = ax.lines[0]
    x = 4.0 * f64.buffer
    assert np.array_equal(curve.get_xdata()[: len(x)], x)  # bytes
    between = np.sqrt(x[:-1] * x[1:])  # every gap between two points, and one past the last
    for b in [*between, 2 * x[-1]]:
        assert _drawn_at(curve, b) == pytest.approx(4 * f64.lookup(b / 4), rel=1e-12)
    # dotted lines: one word (4 B), every operand on chip (4·12,288 B); none at 1 B
    assert _vertical_lines(ax) == [4.0, 4.0 * ALGO_MIN]


def test_figure_plots_keep_joined_points_and_their_one_byte_line(tmp_path, figures):
    """Word size 1 (the artifact's figures): one word is 1 B, and points stay joined."""
    from opatlas.bounds.plots import plot_frontiers

    f = frontier(es.gemm(8, 8, 8))
    plot_frontiers([f], tmp_path / "f.png", plot_min=True)
    (fig,) = figures
    assert fig.axes[0].lines[0].get_drawstyle() == "default"
    assert _vertical_lines(fig.axes[0]) == [1.0, float(f.algo_min)]


# -- 5. the CSV and JSON say the word size and units ------------------------------------------------

def test_cli_csv_has_word_size_and_bytes(capsys, f64):
    code, out, err = cli_in_process(capsys, "bound", "gemm", "64", "64", "64", "--word-bytes",
                                    "4", "--csv", "-")
    assert code == 0, err
    df = pd.read_csv(io.StringIO(out))
    assert list(df.columns[:7]) == ["problem", "buffer", "accesses", "oi", "word_bytes",
                                    "buffer_bytes", "accesses_bytes"]
    assert (df["word_bytes"] == 4).all()
    assert df["buffer"].tolist() == f64.buffer.tolist()
    assert (df["buffer_bytes"] == 4 * df["buffer"]).all()
    assert (df["accesses_bytes"] == 4 * df["accesses"]).all()
    assert df["oi"].to_numpy() == pytest.approx(OPS / df["accesses_bytes"].to_numpy())
    assert df["accesses"].iloc[-1] == ALGO_MIN


def test_cli_at_json_has_word_size_and_units(capsys):
    code, out, err = cli_in_process(capsys, "bound", "gemm", "64", "64", "64", "--word-bytes",
                                    "4", "--at", "100", "--json")
    assert code == 0, err
    got = json.loads(out)
    assert got["buffer"] == 100 and got["accesses"] == AT_100
    assert got["word_bytes"] == 4 and got["buffer_bytes"] == 400
    assert got["accesses_bytes"] == 4 * AT_100 == 278_528
    assert got["oi"] == pytest.approx(OPS / (4 * AT_100))  # 520,192 / 278,528 op/B
    assert got["units"] == {"buffer": "words", "accesses": "words", "buffer_bytes": "bytes",
                            "accesses_bytes": "bytes", "oi": "op/B"}
    code, out, err = cli_in_process(capsys, "bound", "gemm", "64", "64", "64", "--word-bytes",
                                    "4", "--at", "2", "--json")
    below = json.loads(out)
    assert below["accesses"] is None and below["accesses_bytes"] is None
    assert below["buffer_bytes"] == 8


def test_cli_at_text_and_full_json_say_the_word_size(capsys):
    code, out, _ = cli_in_process(capsys, "bound", "gemm", "64", "64", "64", "--word-bytes",
                                  "4", "--at", "100")
    assert code == 0 and out.strip() == "at 100 words: 69,632 accesses (words of 4 B)"
    code, out, _ = cli_in_process(capsys, "bound", "gemm", "8", "8", "8", "--word-bytes", "2",
                                  "--json")
    doc = json.loads(out)
    assert doc["word_bytes"] == 2
    assert doc["units"] == {"buffer": "words", "accesses": "words", "oi": "op/B"}
