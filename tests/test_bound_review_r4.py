"""Review of ``opatlas bound`` (round 4): gbmm bounds GQA's grouped BMM (the artifact's template
on request and in Fig. 13/14), one OI per problem, algo max and OI for any operand count,
``accel``'s seed and sizes, and ``fusion``'s units, --word-bytes, --csv and --at."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from conftest import cli_in_process, one_error
from opatlas.bounds import frontier


def _at(capsys, *args: str) -> tuple[int, str]:
    """``opatlas bound ARGS --at ... --json``: accesses, and stderr."""
    code, out, err = cli_in_process(capsys, "bound", *args, "--json")
    assert code == 0, err
    return json.loads(out)["accesses"], err


# -- 1. gbmm is GQA's grouped BMM; the artifact's template on request ---------------------------

@pytest.mark.parametrize(("gbmm", "einsum", "dims", "at", "want"), [
    (("512", "64", "512", "--heads", "8", "--groups", "8"), "hmk,hkn->hmn",
     "h=8,m=512,k=64,n=512", "3", 270_532_608),
    (("4096", "128", "4096", "-H", "32", "-G", "4"), "hgmk,gkn->hgmn",
     "h=8,g=4,m=4096,k=128,n=4096", "1000", 6_979_321_856),
])
def test_gbmm_bounds_gqa_as_its_einsum_does(capsys, gbmm, einsum, dims, at, want):
    got, err = _at(capsys, "gbmm", *gbmm, "--at", at)
    assert got == want == _at(capsys, "einsum", einsum, "--dims", dims, "--at", at)[0]
    assert "GQA's grouped BMM" in err and "--artifact-template" in err  # which one ran


def test_gbmm_keeps_the_artifacts_template_on_request(capsys):
    got, err = _at(capsys, "gbmm", "512", "64", "512", "--heads", "8", "--groups", "8",
                   "--artifact-template", "--at", "3")
    assert got == 1_210_056_704 and "the artifact's template" in err


def test_gbmm_whole_frontier_equals_the_einsums():
    from opatlas.bounds import from_index_string
    from opatlas.bounds.einsum import gqa_bmm

    ours = frontier(gqa_bmm(16, 8, 12, H=6, G=3))
    theirs = frontier(from_index_string("hgmk,gkn->hgmn", {"h": 2, "g": 3, "m": 16, "k": 8,
                                                            "n": 12}))
    assert ours.buffer.tolist() == theirs.buffer.tolist()
    assert ours.accesses.tolist() == theirs.accesses.tolist()
    assert ours.oi().tolist() == pytest.approx(theirs.oi().tolist())


def test_accel_gbmm_counts_gqas_macs():
    from opatlas.bounds.accel import compute_cycles, sample_mappings
    from opatlas.bounds.arch import load_arch
    from opatlas.cli.bound_cmd import _accel_problem

    with pytest.warns(UserWarning, match="bounding GQA's grouped BMM"):
        e = _accel_problem("gbmm", [256, 64, 256, 8, 8])
    assert e.macs == 8 * 256 * 64 * 256  # H·M·K·N, not H·G·M·K·N
    ms = sample_mappings(e, load_arch("simba"), 20, seed=0)
    assert compute_cycles(ms).tolist() == (-(-e.macs // ms.macs_used)).tolist()


# -- 2. one OI per problem; Fig. 14 draws the notebook's ----------------------------------------

def test_the_artifacts_gbmm_has_one_oi_and_fig14_still_draws_the_notebooks(capsys):
    from opatlas.bounds.figures import fig14_as_notebook, first_of_each
    from opatlas.bounds.problems import fig14

    fr = {"fig14": [frontier(e) for e in fig14()[2:3]]}  # gbmm_4096_128_4096_32_4
    (data,) = first_of_each(fr)
    code, out, err = cli_in_process(capsys, "bound", "gbmm", "4096", "128", "4096", "-H", "32",
                                    "-G", "4", "--artifact-template", "--at", "1e12", "--json")
    assert code == 0, err
    cli = json.loads(out)
    assert data.einsum.name == "gbmm_4096_128_4096_32_4"
    assert data.accesses[-1] == cli["accesses"] == 555_745_280
    assert float(data.oi()[-1]) == pytest.approx(cli["oi"])  # 246.34, as bound gbmm says
    assert cli["oi"] == pytest.approx(246.3396, abs=1e-4)
    (drawn,) = fig14_as_notebook(fr["fig14"])  # the figure: 2·H·M·K·N / accesses, as before
    assert drawn.oi().tolist() == pytest.approx(
        (2 * 32 * 4096 * 128 * 4096 / data.accesses).tolist())
    assert float(drawn.oi()[-1]) == pytest.approx(247.3057, abs=1e-4)


# -- 3. algo max and OI for any number of operands ----------------------------------------------

@pytest.mark.parametrize(("spec", "dims", "algo_max", "ops"), [
    ("mk,kn,nj->mj", "m=8,k=8,n=8,j=8", 4 * 8**4, 3 * 8**4 - 64),  # 2 multiplies + 1 add
    ("mk->m", "m=8,k=8", 2 * 64, 64 - 8),                           # adds only, first elided
    ("mk,kn->mn", "m=8,k=8,n=8", 3 * 8**3, 2 * 8**3 - 64),          # a GEMM, as before
])
def test_algo_max_and_oi_count_every_operand(capsys, spec, dims, algo_max, ops):
    code, out, err = cli_in_process(capsys, "bound", "einsum", spec, "--dims", dims, "--json")
    assert code == 0, err
    got = json.loads(out)
    assert got["algo_max"] == algo_max
    assert [p["oi"] for p in got["points"]] == pytest.approx(
        [ops / p["accesses"] for p in got["points"]])


# -- 4, 5. accel's seed and sizes ---------------------------------------------------------------

def test_a_negative_seed_is_one_line(capsys):
    one_error(*cli_in_process(capsys, "bound", "accel", "simba", "64", "64", "64", "--seed",
                              "-1")[::2], "--seed")


@pytest.mark.parametrize(("args", "needle"), [
    (("--problem", "gemm 64 64 64", "32", "32", "32"),
     "3 inside --problem and 3 after the architecture"),
    (("--problem", "gemm 64 64", "32"), "2 inside --problem and 1 after the architecture"),
    (("--problem", "gemm 64 64"), "gemm takes 3 sizes (M K N), got 2"),
    (("--problem", "gemm 64 x"), "sizes are whole numbers, not 'x'"),
])
def test_accel_sizes_are_given_once_and_counted(capsys, args, needle):
    one_error(*cli_in_process(capsys, "bound", "accel", "simba", *args)[::2], needle)


# -- 6. accel's size orders and defaults --------------------------------------------------------

def test_accel_help_gives_every_kinds_sizes_and_the_defaults_are_said(capsys):
    from typer.testing import CliRunner

    from opatlas.cli import app
    from opatlas.cli.bound_cmd import _accel_problem

    text = " ".join(CliRunner().invoke(app, ["bound", "accel", "--help"],
                                       env={"COLUMNS": "200"}).output.split())
    assert "bmm B M K N" in text and "gbmm M K N [H [G]]" in text
    assert "H and G 1 when left out" in text
    with pytest.warns(UserWarning, match="H and G not given; using 1 for each"):
        assert _accel_problem("gbmm", [64, 32, 16]).ranks["Hg"] == 1
    with pytest.warns(UserWarning, match="G not given"):
        assert _accel_problem("gbmm 64 32 16 4", []).ranks == {"G": 1, "Hg": 4, "M": 64,
                                                                 "K": 32, "N": 16}


# -- 7. fusion: --word-bytes, --csv, --at, and one unit -----------------------------------------

CHAIN = ("--layer", "256,64,256", "--layer", "256,256,64")


def _curves(capsys) -> dict[str, dict[int, int]]:
    code, out, err = cli_in_process(capsys, "bound", "fusion", *CHAIN, "--json")
    assert code == 0, err
    return {k: {p["buffer"]: p["accesses"] for p in v} for k, v in json.loads(out)["curves"].items()}


def test_fusion_at_and_csv_agree_with_its_curves(capsys, tmp_path):
    curves = _curves(capsys)
    code, out, err = cli_in_process(capsys, "bound", "fusion", *CHAIN, "--at", "20000", "--json")
    assert code == 0, err
    got = json.loads(out)
    assert got["buffer"] == 20000
    for label, points in curves.items():
        below = [b for b in points if b <= 20000]
        assert got["accesses"][label] == (points[max(below)] if below else None)
    assert got["accesses"]["unfused"] == 196_608
    path = tmp_path / "f.csv"
    code, _, err = cli_in_process(capsys, "bound", "fusion", *CHAIN, "--word-bytes", "2",
                                  "--csv", str(path))
    assert code == 0, err
    frame = pd.read_csv(path)
    for label, points in curves.items():
        rows = frame[frame["scheme"] == label]
        assert dict(zip(rows["buffer"], rows["accesses"], strict=True)) == points
    assert (frame["buffer_bytes"] == 2 * frame["buffer"]).all()
    assert (frame["accesses_bytes"] == 2 * frame["accesses"]).all()


def test_fusion_plot_is_in_bytes_and_the_text_says_its_words(capsys, tmp_path, monkeypatch):
    import opatlas.bounds.plots as plots

    drawn = {}

    def fake(curves, path, *, mins=None, title=None, best=None):
        drawn.update(curves=curves, mins=mins, best=best)
        return path

    monkeypatch.setattr(plots, "plot_curves", fake)
    curves = _curves(capsys)
    code, out, err = cli_in_process(capsys, "bound", "fusion", *CHAIN, "--word-bytes", "2",
                                    "--plot", str(tmp_path / "f.png"))
    assert code == 0, err
    unfused = drawn["curves"][0]
    assert unfused.buffer.tolist() == [2 * b for b in curves["unfused"]]  # axes say (B)
    assert unfused.accesses.tolist() == [2 * a for a in curves["unfused"].values()]
    assert drawn["mins"]["Algo min w/ fusion"] == 2 * 65_536
    assert np.array_equal(drawn["best"].accesses,
                          2 * np.array(list(curves["best of the three"].values())))
    assert "from buffer 16,704 words" in out and "(words of 2 B)" in out
