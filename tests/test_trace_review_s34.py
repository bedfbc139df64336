"""Review s34 of ``opatlas analyze`` on torch.profiler traces: each row rated against its own
dtype's peak; optimizer steps, embeddings, broadcast matmuls and causal attention counted from
their arguments; no-op dropouts and too-short calls kept out of the counts and the empirical
peaks; --device against the recorded GPU said; a trace with nothing counted named; orphan
kernels counted; a GPU outside the catalog named as the trace names it."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from conftest import cli_in_process, one_error
from opatlas.analyze import api
from opatlas.analyze.aten import CAUSAL_ARG, map_op
from opatlas.errors import OpatlasError

BF16, F32 = "c10::BFloat16", "float"
H100 = [{"name": "NVIDIA H100 80GB HBM3"}]
H100_BF16, H100_FP32, H100_BW = 989.4e12, 66.9e12, 3.35e12
N = 4096


def _op(name: str, ts: float, dur: float, dims: list, types: list,
        concrete: list | None = None) -> dict[str, Any]:
    args: dict[str, Any] = {"Input Dims": dims, "Input type": types}
    if concrete is not None:
        args["Concrete Inputs"] = concrete
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur,
            "args": args}


def _launched(corr: int, ts: float, kernel_ts: float, kernel_dur: float) -> list[dict]:
    """A runtime launch at ``ts`` (inside its op) and the kernel it launched."""
    return [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
             "ts": ts, "dur": 1, "args": {"correlation": corr}},
            _kernel(f"k{corr}", corr, kernel_ts, kernel_dur)]


def _kernel(name: str, corr: int, ts: float, dur: float) -> dict[str, Any]:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
            "args": {"correlation": corr}}


def _write(path: Path, events: list[dict], props: list | None = None) -> Path:
    doc: dict[str, Any] = {"traceEvents": events}
    if props is not None:
        doc["deviceProperties"] = props
    path.write_text(json.dumps(doc))
    return path


def _row(a: Any, name: str) -> dict[str, Any]:
    rows = [r for r in a.rows.to_dict("records") if r["name"] == name]
    assert len(rows) == 1, rows
    return rows[0]


# ------------------------------------------------------------ 1. per-dtype peaks

def _mixed(path: Path) -> Path:
    """A bf16 4096³ mm (200 µs) among fp32 row-wise ops on an H100."""
    ev = [_op("aten::mm", 1000, 20, [[N, N], [N, N]], [BF16, BF16]),
          *_launched(1, 1005, 1100, 200),
          _op("aten::layer_norm", 1030, 10, [[N, N], [], [N], [N], [], []],
              [F32, "", F32, F32, "Scalar", "Scalar"]),
          *_launched(2, 1032, 1310, 60),
          _op("aten::softmax", 1050, 10, [[N, N], [], []], [F32, "Scalar", "Scalar"]),
          *_launched(3, 1052, 1380, 50)]
    return _write(path, ev, H100)


def test_each_row_is_rated_against_its_own_dtypes_peak(tmp_path):
    a = api.analyze(_mixed(tmp_path / "mixed.json"))
    mm, ln = _row(a, "aten::mm"), _row(a, "aten::layer_norm")
    gemm = 2.0 * N**3
    assert mm["roofline_time_s"] == pytest.approx(gemm / H100_BF16)  # not / the fp32 peak
    assert mm["util_compute"] == pytest.approx(gemm / 200e-6 / H100_BF16)  # 69.5%, not 1027%
    assert not mm["flags"]  # not "below bound"
    assert ln["util_compute"] == pytest.approx(8.0 * N * N / 60e-6 / H100_FP32)
    assert ln["roofline_time_s"] == pytest.approx(4 * 2 * N * N / H100_BW)
    at_peak = gemm / H100_BF16 + 8.0 * N * N / H100_FP32 + 5.0 * N * N / H100_FP32
    assert a.summary["utilization"] == pytest.approx(at_peak / 310e-6)  # 45.9%, not 664%
    assert a.summary["peak_flops_s"] == pytest.approx(H100_BF16)  # the dtype of most FLOPs
    assert "bf16 989.40 TFLOP/s" in a.summary["peaks"]
    assert "fp32 66.90 TFLOP/s" in a.summary["peaks"]


# ------------------------------------------------------------ 2. optimizer steps

PARAMS = [[1024, 1024], [1024]]  # a Linear(1024, 1024)'s weight and bias
ELEMS = 1024 * 1024 + 1024


def _fused_adamw(amsgrad: bool) -> dict[str, Any]:
    """The arguments torch.profiler records for _fused_adamw_ (params, grads, exp_avgs,
    exp_avg_sqs, max_exp_avg_sqs, state_steps, then scalars)."""
    return {"Input Dims": [PARAMS, PARAMS, PARAMS, PARAMS, PARAMS if amsgrad else [], [[], []],
                           [], [], [], [], [], [], [], [], []],
            "Input type": ["TensorList"] * 6 + ["Scalar"] * 7 + ["", ""],
            "Concrete Inputs": ["", "", "", "", "", "", "0.001", "0.9", "0.999", "0.01",
                                "1e-08", str(amsgrad), "False", "", ""]}


def test_a_fused_adamw_step_counts_its_params(tmp_path):
    m = map_op("aten::_fused_adamw_", _fused_adamw(False))
    assert (m.op, m.pass_) == ("optimizer", "step")
    assert m.shape == {"tensors": 2, "elements": ELEMS}  # the params, not the scalar arguments
    assert m.flops == 12.0 * ELEMS  # the catalog's adam_step: 12 FLOPs a parameter
    assert m.bytes == 7 * 4 * ELEMS  # param, grad, m, v read; param, m, v written; fp32
    ams = map_op("aten::_fused_adamw_", _fused_adamw(True))
    assert ams.bytes == 9 * 4 * ELEMS  # max_exp_avg_sq read and written too
    args = _fused_adamw(False)
    ev = [_op("aten::_fused_adamw_", 0, 300, args["Input Dims"], args["Input type"])]
    a = api.analyze(_write(tmp_path / "adam.json", ev), device="H100")
    row = _row(a, "aten::_fused_adamw_")
    assert (row["flops"], row["bytes"]) == (12.0 * ELEMS, 7 * 4 * ELEMS)
    assert row["roofline_time_s"] == pytest.approx(7 * 4 * ELEMS / H100_BW)


@pytest.mark.parametrize(("name", "dims", "types", "flops", "tensors"), [
    ("aten::_foreach_mul_", [PARAMS, []], ["TensorList", "Scalar"], 1, 2),
    ("aten::_foreach_lerp_", [PARAMS, PARAMS, []], ["TensorList", "TensorList", "Scalar"], 3, 3),
    ("aten::_foreach_addcdiv_", [PARAMS, PARAMS, PARAMS, []],
     ["TensorList", "TensorList", "TensorList", "ScalarList"], 3, 4),
    ("aten::_foreach_sqrt", [PARAMS], ["TensorList"], 1, 2),
])
def test_a_foreach_op_counts_the_tensors_of_its_lists(name, dims, types, flops, tensors):
    m = map_op(name, {"Input Dims": dims, "Input type": types})
    assert m.shape == {"tensors": 2, "elements": ELEMS}
    assert m.flops == flops * ELEMS
    assert m.bytes == tensors * 4 * ELEMS  # each list read once, one list written


# ------------------------------------------------------------ 3. no-op dropout, short calls

@pytest.mark.parametrize(("concrete", "counted"), [
    (["", "0.10000000000000001", "False"], False),  # eval mode
    (["", "0.", "True"], False),  # p = 0
    (["", "0.10000000000000001", "True"], True)])
def test_a_dropout_that_drops_nothing_is_not_counted(concrete, counted):
    m = map_op("aten::dropout", {"Input Dims": [[512, 512], [], []],
                                 "Input type": [F32, "Scalar", "Scalar"],
                                 "Concrete Inputs": concrete})
    assert (m is not None) == counted
    if counted:
        assert m.bytes == 2 * 4 * 512 * 512


def test_a_dropout_without_a_kernel_is_an_other_row_and_sets_no_peak(tmp_path):
    """No Concrete Inputs (an older trace): the dropout's lack of any child says it."""
    ev = [_op("aten::mm", 0, 2000, [[512, 512], [512, 512]], [F32, F32]),
          _op("aten::layer_norm", 3000, 50, [[512, 512], [], [512], [512], [], []],
              [F32, "", F32, F32, "Scalar", "Scalar"]),
          _op("aten::dropout", 4000, 0.07, [[512, 512], [], []], [F32, "Scalar", "Scalar"])]
    a = api.analyze(_write(tmp_path / "drop.json", ev))
    drop = _row(a, "aten::dropout")
    assert drop["op"] == "other" and math.isnan(drop["flops"])  # not counted
    ln_bytes = 2 * 4 * 512 * 512
    assert a.summary["peak_bytes_s"] == pytest.approx(ln_bytes / 50e-6)  # not 2 MB / 0.07 µs


def test_empirical_peaks_come_from_calls_of_10us_or_more(tmp_path, capsys):
    ev = [_op("aten::mm", 0, 2000, [[512, 512], [512, 512]], [F32, F32]),
          _op("aten::layer_norm", 3000, 50, [[512, 512], [], [512], [512], [], []],
              [F32, "", F32, F32, "Scalar", "Scalar"]),
          *(_op("aten::gelu", 4000 + 10 * i, 2, [[512, 512], []], [F32, ""]) for i in range(3))]
    a = api.analyze(_write(tmp_path / "short.json", ev))
    assert a.summary["peak_flops_s"] == pytest.approx(2 * 512**3 / 2000e-6)
    assert a.summary["peak_bytes_s"] == pytest.approx(2 * 4 * 512 * 512 / 50e-6)
    gelu = _row(a, "aten::gelu")  # 2 µs a call: faster than the bound, and flagged
    assert gelu["calls"] == 3 and "below bound" in gelu["flags"]
    # only short calls: their peaks, said; --strict refuses them
    short = _write(tmp_path / "only.json", ev[2:])
    b = api.analyze(short)
    assert b.summary["peak_bytes_s"] == pytest.approx(2 * 4 * 512 * 512 / 2e-6)
    assert any("takes 10 µs a call" in n for n in b.summary["notes"])
    code, _, err = cli_in_process(capsys, "analyze", str(short), "--strict")
    one_error(code, err, str(short), "--strict", "--device NAME")


# ------------------------------------------------------------ 4. embedding

def test_an_embedding_moves_the_looked_up_rows_not_the_table():
    m = map_op("aten::embedding", {"Input Dims": [[32000, 256], [1, 16], [], [], []],
                                   "Input type": [F32, "long int", "Scalar", "Scalar", "Scalar"]})
    assert m.shape == {"ids": 16, "width": 256}
    assert m.bytes == 16 * 256 * 4 + 16 * 256 * 4 + 16 * 8  # rows read, written; the ids
    assert m.flops == 0


# ------------------------------------------------------------ 5. broadcast matmul

def test_matmul_broadcasts_its_batch_dims_and_shapes_stay_apart(tmp_path):
    m = map_op("aten::matmul", {"Input Dims": [[4, 1, 128, 64], [1, 3, 64, 32]],
                                "Input type": [F32, F32]})
    assert (m.shape["batch"], m.shape["M"], m.shape["K"], m.shape["N"]) == (12, 128, 64, 32)
    assert m.flops == 2 * 12 * 128 * 64 * 32 and m.gemms == [(12, 128, 64, 32)]
    assert m.bytes == 4 * (4 * 128 * 64 + 3 * 64 * 32 + 12 * 128 * 32)  # each operand once
    b = map_op("aten::matmul", {"Input Dims": [[128, 64], [4, 64, 32]], "Input type": [F32, F32]})
    assert b.shape["batch"] == 4 and b.bytes == 4 * (128 * 64 + 4 * 64 * 32 + 4 * 128 * 32)
    assert map_op("aten::matmul", {"Input Dims": [[4, 8, 16], [3, 16, 8]],
                                   "Input type": [F32, F32]}) is None  # 4 and 3 do not broadcast
    ev = [_op("aten::matmul", 0, 100, [[4, 1, 128, 64], [1, 3, 64, 32]], [F32, F32]),
          _op("aten::matmul", 200, 100, [[128, 64], [4, 64, 32]], [F32, F32])]
    a = api.analyze(_write(tmp_path / "mat.json", ev), device="H100")
    rows = a.rows[a.rows["op"] == "matmul"]
    assert sorted(s["batch"] for s in rows["shape"]) == [4, 12] and set(rows["calls"]) == {1}


# ------------------------------------------------------------ 6. causal attention

def test_causal_sdpa_does_half_the_score_work(tmp_path):
    dims = [[4, 32, N, 128]] * 3 + [[]] * 5
    types = [BF16] * 3 + ["", "Scalar", "Scalar", "", "Scalar"]
    full = 2.0 * 4 * 32 * N * N * (128 + 128)
    ev = [_op("aten::scaled_dot_product_attention", 1000, 30, dims, types,
              ["", "", "", "", "0.", "True", "", "False"]),
          _op("aten::_scaled_dot_product_flash_attention", 1002, 25, dims[:7], types[:7],
              ["", "", "", "0.", "True", "False", ""]),
          *_launched(1, 1010, 1100, 916)]
    a = api.analyze(_write(tmp_path / "causal.json", ev, H100))
    row = _row(a, "aten::scaled_dot_product_attention")
    assert row["flops"] == pytest.approx(full / 2) and row["shape"]["causal"] is True
    assert row["roofline_time_s"] == pytest.approx(full / 2 / H100_BF16)
    assert not row["flags"]  # 916 µs is over the causal bound (556 µs), not under the full's
    plain = map_op("aten::scaled_dot_product_attention",
                   {"Input Dims": dims, "Input type": types,
                    "Concrete Inputs": ["", "", "", "", "0.", "False", "", "False"]})
    assert plain.flops == full and "causal" not in plain.shape


def test_the_causal_flags_position_is_each_ops_schemas():
    torch = pytest.importorskip("torch")
    for name, i in CAUSAL_ARG.items():
        if name.startswith("flash_attn::"):
            continue  # the flash-attn package's ops, not in torch
        schema = getattr(torch.ops.aten, name).default._schema
        assert schema.arguments[i].name in ("is_causal", "custom_mask_type"), name


# ------------------------------------------------------------ 9. --device against the trace

def test_a_device_other_than_the_recorded_one_is_said(tmp_path, capsys):
    path = _mixed(tmp_path / "mixed.json")
    code, _, err = cli_in_process(capsys, "analyze", str(path), "--device", "A100")
    assert code == 0
    assert ("the trace was recorded on NVIDIA H100 80GB HBM3; A100-SXM4-80GB's peaks are "
            "used, as --device asks") in err
    code, _, err = cli_in_process(capsys, "analyze", str(path), "--device", "H100")
    assert code == 0 and "recorded on" not in err


# ------------------------------------------------------------ 10. nothing counted

def test_a_trace_with_no_counted_op_names_the_file_and_the_way_out(tmp_path, capsys):
    ev = [_op("aten::conv2d", 0, 500, [[4, 16, 32, 32], [32, 16, 3, 3], [32]], [F32] * 3)]
    path = _write(tmp_path / "conv.json", ev)
    code, _, err = cli_in_process(capsys, "analyze", str(path))
    one_error(code, err, str(path), "no op in the trace has FLOP or byte counts",
              "aten::conv2d 100%", "--device NAME")
    with pytest.raises(OpatlasError, match="cpu"):
        api.analyze(path)
    assert api.analyze(path, device="A100").summary["utilization"] == 0.0


# ------------------------------------------------------------ 11. orphan kernels

def test_kernels_without_their_launch_are_counted(tmp_path):
    ev = [_op("aten::mm", 1000, 20, [[N, N], [N, N]], [BF16, BF16]),
          *_launched(1, 1005, 1100, 200),
          _kernel("orphan_kernel", 998, 1400, 10), _kernel("orphan_kernel", 999, 1500, 10)]
    a = api.analyze(_write(tmp_path / "orphan.json", ev, H100))
    orphan = _row(a, "kernel orphan_kernel")
    assert (orphan["calls"], orphan["time_s"]) == (2, pytest.approx(20e-6))


# ------------------------------------------------------------ 13b. a GPU outside the catalog

def test_a_gpu_outside_the_catalog_keeps_its_name(tmp_path, capsys):
    ev = [_op("aten::mm", 1000, 20, [[N, N], [N, N]], [BF16, BF16]),
          *_launched(1, 1005, 1100, 200)]
    path = _write(tmp_path / "nvl.json", ev, [{"name": "NVIDIA H100 NVL"}])
    a = api.analyze(path)
    assert a.summary["device"] == "NVIDIA H100 NVL"
    assert any(n.startswith("device NVIDIA H100 NVL is not in the catalog")
               for n in a.summary["notes"])


def test_the_no_orojenesis_note_says_how_to_get_one_even_when_loaded(tmp_path, capsys):
    ev = [_op("aten::mm", 0, 2000, [[512, 512], [512, 512]], [F32, F32])]
    a = api.analyze(_write(tmp_path / "cpu.json", ev))
    said = [n for n in a.summary["notes"] if "no Orojenesis bound" in n]
    assert len(said) == 1 and said[0].endswith(
        "(analyze the trace again with --device NAME to name a catalog device)")
