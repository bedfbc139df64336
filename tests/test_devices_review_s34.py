"""Device catalog review (s34): every GPU's memory in one unit, the datasheet's nominal "GB"
taken as GiB as nvidia-smi shows the cards hold (H200, B200, GB200 and GH200 144GB were
decimal, 6-7% short); fp32 and fp64 peaks on the Blackwell entries, so an fp32 trace can be
analysed against a B200; a dtype a device lacks is one error line saying what to do."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import REPO, cli_in_process, one_error
from opatlas.devices import DEVICES, GiB, MiB, get_device

EXAMPLE = REPO / "examples" / "estimate" / "llama-3.1-8b-dgx-h100.yml"
NOMINAL_GB = {"A100-SXM4-80GB": 80, "H100-SXM5-80GB": 80, "H200-SXM-141GB": 141,
              "GH200-96GB": 96, "GH200-144GB": 144, "B200-SXM-180GB": 180, "GB200-186GB": 186,
              "MI300X": 192}
# nvidia-smi's memory.total on each card (published outputs)
NVIDIA_SMI_MIB = {"A100-SXM4-80GB": 81920, "H100-SXM5-80GB": 81559, "GH200-96GB": 97871,
                  "H200-SXM-141GB": 143771, "GH200-144GB": 146831, "B200-SXM-180GB": 183359,
                  "GB200-186GB": 189471}


def test_every_gpu_memory_is_its_nominal_gb_as_gib():
    assert {n: DEVICES[n].memory_bytes / GiB for n in NOMINAL_GB} == NOMINAL_GB


@pytest.mark.parametrize("name", sorted(NVIDIA_SMI_MIB))
def test_catalog_memory_is_within_a_gib_of_what_nvidia_smi_reports(name):
    held = NVIDIA_SMI_MIB[name] * MiB
    assert 0 <= DEVICES[name].memory_bytes - held < GiB


@pytest.mark.parametrize(("device", "limit"), [("H200", 139.0), ("B200", 178.0),
                                               ("GB200", 184.0), ("GH200-HBM3e", 142.0),
                                               ("H100", 78.0)])
def test_estimate_memory_limit_is_the_card_less_the_reserve(capsys, device, limit):
    code, out, err = cli_in_process(capsys, "estimate", str(EXAMPLE), "--set",
                                    f"cluster.device={device}", "--json")
    assert code == 0, err
    assert json.loads(out)["memory_limit_gib"] == pytest.approx(limit)  # 2 GiB reserved


def _trace(path: Path, dtype: str) -> Path:
    """A CPU torch.profiler trace of two ``dtype`` matmuls, no device named in it."""
    ev = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 100 * i,
           "dur": d, "args": {"Input Dims": [[256, 512], [512, 1024]],
                              "Input type": [dtype] * 2}}
          for i, d in enumerate((2000, 3000))]
    path.write_text(json.dumps({"traceEvents": ev}))
    return path


@pytest.mark.parametrize(("device", "dtype", "peak"), [
    ("B200", "float", 75e12), ("GB200", "float", 80e12),
    ("B200", "double", 37e12), ("GB200", "double", 40e12), ("H200", "double", 66.9e12)])
def test_an_fp32_or_fp64_trace_is_analysed_against_a_blackwell(tmp_path, capsys, device, dtype,
                                                              peak):
    code, out, err = cli_in_process(capsys, "analyze", str(_trace(tmp_path / "t.json", dtype)),
                                    "--device", device, "--json")
    assert code == 0, err
    summary = json.loads(out)["summary"]
    assert summary["device"] == get_device(device).name
    assert summary["peak_flops_s"] == pytest.approx(peak)


def test_every_gpu_has_fp32_and_fp64_peaks():
    lacking = {n: sorted({"fp32", "fp64"} - set(DEVICES[n].peak_flops)) for n in NOMINAL_GB}
    assert {n: miss for n, miss in lacking.items() if miss} == {}


def test_a_dtype_the_device_lacks_says_what_to_do(tmp_path, capsys):
    code, _, err = cli_in_process(capsys, "analyze", str(_trace(tmp_path / "t.json", "float")),
                                  "--device", "n150")
    one_error(code, err, "Wormhole-n150", "'fp32'", "it has bf16, bfp8, fp16, fp8",
              "name a device with a fp32 peak", "B200-SXM-180GB", "GB200-186GB")
