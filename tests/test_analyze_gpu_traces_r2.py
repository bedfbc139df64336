"""Second review of the analyzer on the real H100 traces (tests/data/gpu_traces): autocast
casts as rows of their own, softmax's dtype argument, unmapped rows named by their context,
AdamW's addcmul reading one gradient list once, the cross-entropy backward as one op family,
the dtype column, and ops that launched no kernel.

Expected values come from the raw trace JSON (parsed and linked by flow events in
test_analyze_gpu_traces.raw, independently of opatlas's reader) or from the model's sizes."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from conftest import cli_in_process
from opatlas.analyze.aten import map_op
from opatlas.analyze.chrome import AUTOCAST_CONCRETE, split_events
from opatlas.analyze.sources.trace import NO_KERNEL
from opatlas.analyze.tables import plain_columns
from test_analyze_gpu_traces import BATCH, DATA, HEADS, NAMES, VOCAB, Raw, _dims, _inside, analysis, raw

EVALUATE = "autograd::engine::evaluate_function: "


def _children(r: Raw, e: dict[str, Any]) -> list[dict[str, Any]]:
    """The operator events directly inside ``e`` (no other event inside ``e`` encloses them)."""
    inner = [o for o in r.ops if o is not e and _inside(o, e) and o["dur"] <= e["dur"]]
    return [o for o in inner if not any(p is not o and _inside(o, p) and p["dur"] >= o["dur"]
                                        for p in inner)]


def _redispatched(r: Raw, name: str) -> list[tuple[dict, dict, list[dict]]]:
    """(outer, inner, casts) of each autocast re-dispatch of ``name``: an outermost event
    enclosing a same-named one whose tensor input types differ, and its aten::to children."""
    out = []
    for e in r.outermost(name):
        kids = _children(r, e)
        inner = [k for k in kids if k["name"] == name]
        if inner and inner[0]["args"]["Input type"] != e["args"]["Input type"]:
            out.append((e, inner[0], [k for k in kids if k["name"] == "aten::to"]))
    return out


def _kernel_chain_times(r: Raw) -> dict[tuple[str, str], tuple[float, set[int]]]:
    """(top-level event's name, innermost op's name) -> (µs of the device events launched
    there, ids of the innermost ops that launched them)."""
    out: dict[tuple[str, str], tuple[float, set[int]]] = {}
    for k, up in zip(r.device, r.enclosing, strict=True):
        key = (up[0]["name"], up[-1]["name"])
        t, who = out.get(key, (0.0, set()))
        out[key] = (t + k["dur"], who | {id(up[-1])})
    return out


# --- 1. autocast casts are rows of their own ----------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_autocast_casts_are_rows_of_their_own_and_the_ops_keep_their_kernels(name):
    r, a = raw(name), analysis(name)
    lin = _redispatched(r, "aten::linear")
    assert len(lin) == len(r.outermost("aten::linear")) == 5  # every linear is cast for
    # each linear row is the time of the kernels of the call that ran (the inner bf16 one)
    linear = a.rows[a.rows["name"] == "aten::linear"]
    want: dict[tuple[int, int, int], float] = {}
    for _, i, _ in lin:
        (*rows, k), (n, _) = _dims(i)[:2]
        want[(math.prod(rows), k, n)] = want.get((math.prod(rows), k, n), 0.0) + r.kernel_us(i)
    got = {(s["M"], s["K"], s["N"]): t
           for s, t in zip(linear["shape"], linear["time_s"], strict=True)}
    assert got.keys() == want.keys()
    for key, us in want.items():
        assert got[key] == pytest.approx(us * 1e-6, rel=1e-9), key
    # the casts: fp32 read, bf16 written, timed by their own kernels
    casts = [c for _, _, cs in lin + _redispatched(r, "aten::matmul") for c in cs]
    assert casts and all(c["args"]["Concrete Inputs"][1] == "15" for c in casts)
    rows = a.rows[a.rows["op"] == "cast"]
    assert set(rows["name"]) == {"aten::to (autocast)"} and set(rows["dtype"]) == {"bf16"}
    assert rows["calls"].sum() == len(casts)
    assert rows["time_s"].sum() == pytest.approx(sum(r.kernel_us(c) for c in casts) * 1e-6,
                                                 rel=1e-9)
    assert rows["bytes"].sum() == sum(6 * math.prod(_dims(c)[0]) for c in casts)
    assert (rows["flops"] == 0).all() and set(rows["limiter"]) <= {"memory", "overhead"}
    # nothing lost: the rows still add up to every device event's time
    assert a.rows["time_s"].sum() == pytest.approx(sum(k["dur"] for k in r.device) * 1e-6,
                                                   rel=1e-9)


def test_the_softmax_output_cast_leaves_the_matmul_at_1024():
    """The review's case: the fp32 softmax output cast to bf16 inside att @ v's matmul."""
    r, a = raw("gpt_block_unfused_s1024"), analysis("gpt_block_unfused_s1024")
    ((outer, inner, (cast,)),) = _redispatched(r, "aten::matmul")
    elems = BATCH * HEADS * 1024 * 1024
    assert _dims(cast)[0] == [BATCH, HEADS, 1024, 1024] and cast["args"]["Input type"][0] == "float"
    assert r.kernel_us(outer) == pytest.approx(r.kernel_us(inner) + r.kernel_us(cast))
    mm = a.rows[(a.rows["op"] == "matmul") & a.rows["shape"].map(lambda s: s.get("K") == 1024)]
    assert len(mm) == 1
    assert mm.iloc[0]["time_s"] == pytest.approx(r.kernel_us(inner) * 1e-6, rel=1e-9)
    row = a.rows[(a.rows["op"] == "cast") & a.rows["shape"].map(lambda s: s.get("elements") == elems)]
    assert len(row) == 1 and row.iloc[0]["shape"] == {"elements": elems, "from": "fp32",
                                                      "to": "bf16"}
    assert row.iloc[0]["time_s"] == pytest.approx(r.kernel_us(cast) * 1e-6, rel=1e-9)
    assert row.iloc[0]["bytes"] == 6 * elems  # 4 B read, 2 B written an element
    assert row.iloc[0]["time_s"] > 100e-6  # the bulk of the old 209.8 µs


# --- 2. softmax's dtype argument ------------------------------------------------------------

@pytest.mark.parametrize("seq", (512, 1024, 2048))
def test_autocast_softmax_writes_fp32(seq):
    r, a = raw(f"gpt_block_unfused_s{seq}"), analysis(f"gpt_block_unfused_s{seq}")
    (sm,) = r.outermost("aten::softmax")
    (inner,) = [k for k in _children(r, sm) if k["name"] == "aten::softmax"]
    assert sm["args"]["Concrete Inputs"][2] == "" and inner["args"]["Concrete Inputs"][2] == "6"
    assert any("softmax_warp_forward<float, float" in k for k in r.kernels(sm))
    row = a.rows[(a.rows["op"] == "softmax") & (a.rows["pass"] == "fwd")]
    elems = BATCH * HEADS * seq * seq
    assert len(row) == 1 and row.iloc[0]["bytes"] == (2 + 4) * elems  # bf16 in, fp32 out
    assert row.iloc[0]["dtype"] == "bf16"


def test_softmax_dtype_argument_sets_the_output_bytes():
    dims = [[8, 16], [], []]
    bf16 = ["c10::BFloat16", "Scalar", "Scalar"]
    assert map_op("aten::softmax", {"Input Dims": dims, "Input type": bf16,
                                    "Concrete Inputs": ["", "-1", "6"]}).bytes == 6 * 128
    assert map_op("aten::log_softmax", {"Input Dims": dims, "Input type": bf16,
                                        "Concrete Inputs": ["", "-1", "6"]}).bytes == 6 * 128
    assert map_op("aten::softmax", {"Input Dims": dims, "Input type": ["float", "Scalar", ""],
                                    "Concrete Inputs": ["", "-1", "5"]}).bytes == 6 * 128
    assert map_op("aten::softmax", {"Input Dims": dims, "Input type": bf16,
                                    "Concrete Inputs": ["", "-1", ""]}).bytes == 4 * 128


def test_the_redispatch_hands_its_dtype_to_the_outer_softmax():
    def op(ts: float, dur: float, concrete: list[str]) -> dict:
        return {"ph": "X", "cat": "cpu_op", "name": "aten::softmax", "pid": 1, "tid": 1,
                "ts": ts, "dur": dur, "args": {"Input Dims": [[2, 4], [], []],
                                               "Input type": ["c10::BFloat16", "Scalar", ""],
                                               "Concrete Inputs": concrete}}

    doc = {"traceEvents": [op(0.0, 10.0, ["", "-1", ""]), op(1.0, 8.0, ["", "-1", "6"]),
                           op(20.0, 10.0, ["", "-1", ""]), op(21.0, 8.0, ["", "0", "6"])]}
    ops, _, _ = split_events(doc)
    assert ops.args[0]["Concrete Inputs"] == ["", "-1", "6"]
    assert ops.args[0][AUTOCAST_CONCRETE] == ["", "-1", ""]
    # a re-dispatch that changes a recorded scalar (dim -1 -> 0) is not taken
    assert ops.args[2]["Concrete Inputs"] == ["", "-1", ""] and AUTOCAST_CONCRETE not in ops.args[2]


# --- 3. unmapped rows named by their context ------------------------------------------------

def test_unmapped_copies_are_rows_by_what_called_them():
    r, a = raw("gpt_block_unfused_s1024"), analysis("gpt_block_unfused_s1024")
    chains = _kernel_chain_times(r)
    other = a.rows[a.rows["op"] == "other"].set_index("name")
    assert "aten::copy_" not in other.index
    for top, row in ((f"{EVALUATE}ToCopyBackward0", "ToCopyBackward0 > aten::copy_"),
                     ("aten::to", "aten::to > aten::copy_"),  # logits.float()
                     (f"{EVALUATE}MaskedFillBackward0", "MaskedFillBackward0 > aten::copy_"),
                     ("aten::masked_fill", "aten::masked_fill > aten::copy_")):
        us, who = chains[(top, "aten::copy_")]
        assert other.loc[row, "time_s"] == pytest.approx(us * 1e-6, rel=1e-9), row
        assert other.loc[row, "calls"] == len(who), row
    assert other.loc["ToCopyBackward0 > aten::copy_", "calls"] == 15
    # an op at the top level keeps its own name
    us, _ = chains[("aten::div", "aten::div")]
    assert other.loc["aten::div", "time_s"] == pytest.approx(us * 1e-6, rel=1e-9)


# --- 4. AdamW's addcmul(exp_avg_sq, g, g) --------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_addcmul_of_a_list_by_itself_reads_it_once(name):
    r, a = raw(name), analysis(name)
    (e,) = r.outermost("aten::_foreach_addcmul_")
    lists = _dims(e)[:3]
    assert lists[1] == lists[2] and len(lists[0]) == 14
    elems = sum(math.prod(d) for d in lists[0])
    row = a.rows[a.rows["name"] == "aten::_foreach_addcmul_"].iloc[0]
    assert row["bytes"] == 12 * elems  # exp_avg_sq and grads read, exp_avg_sq written, fp32
    assert row["headroom"] >= 1 and "below bound" not in row["flags"]
    # addcdiv(params, exp_avg, denom): three different lists, 16 B an element
    div = a.rows[a.rows["name"] == "aten::_foreach_addcdiv_"].iloc[0]
    assert div["bytes"] == 16 * elems


# --- 5. the loss's backward ---------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_cross_entropy_backward_is_one_op_family(name):
    r, a = raw(name), analysis(name)
    t = BATCH * int(name.rsplit("_s", 1)[1])
    (nll,) = r.outermost("aten::nll_loss_backward")
    (lsm,) = r.outermost("aten::_log_softmax_backward_data")
    assert _dims(nll)[0] == [] and _dims(nll)[1] == [t, VOCAB]  # a 0-d grad_output first
    rows = a.rows[(a.rows["op"] == "cross_entropy") & (a.rows["pass"] == "bwd")]
    by = rows.set_index("name")
    assert set(by.index) == {"aten::nll_loss_backward", "aten::_log_softmax_backward_data"}
    assert by.loc["aten::nll_loss_backward", "time_s"] == pytest.approx(
        r.kernel_us(nll) * 1e-6, rel=1e-9)
    # grad_input written whole (fp32), int64 targets read
    assert by.loc["aten::nll_loss_backward", "bytes"] == 4 * t * VOCAB + 8 * t
    assert by.loc["aten::_log_softmax_backward_data", "time_s"] == pytest.approx(
        r.kernel_us(lsm) * 1e-6, rel=1e-9)
    other = a.rows[a.rows["op"] == "other"]
    assert not other["name"].str.contains("nll_loss|log_softmax").any()
    # the attention softmax's backward (unfused) stays a softmax
    soft = a.rows[(a.rows["op"] == "softmax") & (a.rows["pass"] == "bwd")]
    assert len(soft) == ("unfused" in name)


# --- 6. the dtype column --------------------------------------------------------------------

def test_dtype_is_a_column_of_the_json_html_and_text(capsys, tmp_path):
    name = "gpt_block_sdpa_s512"
    html = tmp_path / "r.html"
    code, out, err = cli_in_process(capsys, "analyze", str(DATA / f"{name}.json.gz"), "--json",
                                    "--html", str(html))
    assert code == 0, err
    doc = json.loads(out)
    assert "dtype" in [c["key"] for c in doc["columns"]]
    lin = [row for row in doc["rows"] if row["name"] == "aten::linear"]
    assert lin and {row["dtype"] for row in lin} == {"bf16"}
    assert '{"key": "dtype", "label": "dtype"' in html.read_text()
    assert "dtype" in [c.key for c in plain_columns(analysis(name))]
    code, out, err = cli_in_process(capsys, "analyze", str(DATA / f"{name}.json.gz"))
    assert code == 0 and "dtype" in out.splitlines()[out.splitlines().index(next(
        line for line in out.splitlines() if "profiled as" in line))]


# --- 7. ops that launched no kernel --------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_a_cpu_only_op_is_labelled_as_launching_no_kernel(name):
    r, a = raw(name), analysis(name)
    idle = [e for e in r.outermost("aten::_foreach_add_") if not r.kernels(e)]
    assert len(idle) == 1 and _dims(idle[0])[0] == [[]] * 14
    rows = a.rows[a.rows["limiter"] == NO_KERNEL]
    assert len(rows) == 1 and rows.iloc[0]["name"] == "aten::_foreach_add_"
    assert rows.iloc[0]["time_s"] == 0 and rows.iloc[0]["shape"]["elements"] == 14
    # every other op row launched kernels
    ops = a.rows[(a.rows["op"] != "other") & (a.rows["limiter"] != NO_KERNEL)]
    assert (ops["time_s"] > 0).all()
    assert any("launched no GPU kernel (aten::_foreach_add_)" in n for n in a.summary["notes"])
