"""Session 38: defaults that shape an estimate said, listed and refused under --strict; data
mode's alpha-beta collectives without NCCL data an assumption; a misspelled required key
reported as the typo; an empty file and a near-miss bundled name said as such; one message
for NCCL samples of another device."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import cli_in_process, one_error
from opatlas.estimate.config import bundled_names
from opatlas.samples import bundled_dataset

# everything assumed_defaults already names, written out
LAYOUT = {"training": {"global_batch": 16, "micro_batch": 1, "dtype": "bf16"},
          "parallel": {"dp": 2, "tp": 2, "pp": 2, "zero": 1, "recompute": "selective"},
          "cluster": {"device": "H100", "gpus_per_node": 4, "intra_bw_gbps": 450,
                      "inter_bw_gbps": 50},
          "ops": {"mode": "analytical", "compute_efficiency": 0.7, "memory_efficiency": 0.8}}
MODEL = {"name": "m", "layers": 4, "hidden": 1024, "heads": 16, "seq_len": 2048}
# what the reviewer's min.yml leaves to opatlas on 2·2·2 GPUs, 4 a node: all of it matters
ASSUMED = ("assumed (the defaults) model.vocab = 50257, model.ffn = 4096 (4 · model.hidden), "
           "model.ffn_kind = gelu, model.norm = layernorm, model.attention = flash, "
           "parallel.sequence_parallel = false, parallel.schedule = 1f1b, "
           "parallel.dp_overlap = true, parallel.bucket_mb = 25.0, "
           "cluster.intra_latency_us = 5.0, cluster.inter_latency_us = 10.0; "
           "--set KEY=VALUE or write them into the config")
STATED = {"model": {"vocab": 50257, "ffn": 4096, "ffn_kind": "gelu", "norm": "layernorm",
                    "attention": "flash"},
          "parallel": {"sequence_parallel": False, "schedule": "1f1b", "dp_overlap": True,
                       "bucket_mb": 25.0},
          "cluster": {"intra_latency_us": 5.0, "inter_latency_us": 10.0}}
# the bundled llama2-7b's defaults, stated
LLAMA_STATED = ("--set", "model.attention=flash", "--set", "parallel.dp_overlap=true",
                "--set", "parallel.bucket_mb=25", "--set", "cluster.intra_latency_us=5",
                "--set", "cluster.inter_latency_us=10")


def _write(tmp_path: Path, name: str, stated: dict | None = None, **sections: dict) -> str:
    cfg = {"model": dict(MODEL), **{k: dict(v) for k, v in LAYOUT.items()}}
    for section, values in (stated or {}).items():
        cfg[section].update(values)
    for section, values in sections.items():
        cfg[section].update(values)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


# ------------------------------------------------ 1. defaults that shape the estimate


def test_unstated_defaults_are_one_line_listed_and_refused(tmp_path, capsys):
    path = _write(tmp_path, "min.yml")
    code, out, err = cli_in_process(capsys, "estimate", path, "--json")
    assert code == 0 and err.count("assumed (the defaults)") == 1, err
    assumed = json.loads(out)
    assert assumed["assumptions"] == [ASSUMED]
    code, _, err = cli_in_process(capsys, "estimate", path, "--strict", "--json")
    line = one_error(code, err, "model.vocab = 50257", "--strict refuses defaults",
                     "--set model.vocab=50257")
    assert f"In file {path}" in line
    # the same values stated: nothing assumed, nothing refused, the very same step
    full = _write(tmp_path, "full.yml", STATED)
    code, out, err = cli_in_process(capsys, "estimate", full, "--strict", "--json")
    assert code == 0, err
    stated = json.loads(out)
    assert stated["assumptions"] == [] and "assumed" not in err
    assert stated["step_time_s"] == assumed["step_time_s"]
    assert stated["breakdown"] == assumed["breakdown"]


def test_a_default_that_changes_nothing_is_no_assumption(tmp_path, capsys):
    # one GPU: no tp (sequence parallelism), pp (schedule), dp (overlap, buckets) nor links
    path = _write(tmp_path, "one.yml", {"model": STATED["model"]},
                  parallel={"dp": 1, "tp": 1, "pp": 1}, training={"global_batch": 8})
    code, out, err = cli_in_process(capsys, "estimate", path, "--strict", "--json")
    assert code == 0 and json.loads(out)["assumptions"] == [], err
    # within one node: the network's latency is moot, the NVLink's is not
    path = _write(tmp_path, "node.yml", {"model": STATED["model"],
                                         "parallel": STATED["parallel"]},
                  cluster={"gpus_per_node": 8})
    code, out, err = cli_in_process(capsys, "estimate", path, "--json")
    assert json.loads(out)["assumptions"] == [
        "assumed (the defaults) cluster.intra_latency_us = 5.0; --set KEY=VALUE or write "
        "them into the config"]


def test_an_explicit_key_equal_to_the_default_is_no_assumption(tmp_path, capsys):
    path = _write(tmp_path, "min.yml", {"model": {"vocab": 50257, "attention": "flash"}})
    code, out, err = cli_in_process(capsys, "estimate", path, "--json")
    assert code == 0, err
    (line,) = json.loads(out)["assumptions"]
    assert "model.vocab" not in line and "model.attention" not in line
    assert line.startswith("assumed (the defaults) model.ffn = 4096 (4 · model.hidden), "
                           "model.ffn_kind = gelu, model.norm = layernorm, ")


# ------------------------------------------------ 2. data mode without NCCL data


def test_data_mode_without_nccl_data_says_its_collectives_are_modelled(tmp_path, capsys):
    path = _write(tmp_path, "data.yml", STATED, ops={"mode": "data", "data": "h100"})
    code, out, err = cli_in_process(capsys, "estimate", path, "--json")
    assert code == 0, err
    (line,) = [a for a in json.loads(out)["assumptions"] if "nccl_data" in a]
    assert line.startswith("assumed (no cluster.nccl_data given) every collective timed by "
                           "the alpha-beta model of the cluster's links")
    code, _, err = cli_in_process(capsys, "estimate", path, "--strict")
    one_error(code, err, "key 'cluster.nccl_data'", "--set cluster.nccl_data=FOLDER",
              "--analytical")
    # --analytical models every collective by choice: nothing to refuse
    code, out, err = cli_in_process(capsys, "estimate", path, "--analytical", "--json")
    assert code == 0 and not any("nccl_data" in a for a in json.loads(out)["assumptions"])
    # one GPU: no collective to time
    one = _write(tmp_path, "one.yml", STATED, ops={"mode": "data", "data": "h100"},
                 parallel={"dp": 1, "tp": 1, "pp": 1}, training={"global_batch": 8})
    code, out, err = cli_in_process(capsys, "estimate", one, "--json")
    assert code == 0 and not any("nccl_data" in a for a in json.loads(out)["assumptions"])


# ------------------------------------------------ 3. a misspelled required key


def test_a_misspelled_required_key_is_reported_as_the_typo(tmp_path, capsys):
    text = (bundled_dataset().parent / "configs" / "llama2-7b.yml").read_text()
    assert "hidden: 4096" in text
    path = tmp_path / "typo.yml"
    path.write_text(text.replace("hidden: 4096", "hiden: 4096"))
    code, _, err = cli_in_process(capsys, "estimate", str(path))
    line = one_error(code, err, "key 'model.hiden', value 4096",
                     "unknown key (did you mean 'hidden'?)")
    assert "Field required" not in line
    # a missing key with no near miss beside it is still reported missing
    path.write_text(text.replace("hidden: 4096, ", ""))
    one_error(*cli_in_process(capsys, "estimate", str(path))[::2], "key 'model.hidden'",
              "Field required")


# ------------------------------------------------ 4. what a bad path is said to be


def test_an_empty_config_is_said_to_be_empty(tmp_path, capsys):
    for text in ("", "# only a comment\n"):
        path = tmp_path / "empty.yml"
        path.write_text(text)
        one_error(*cli_in_process(capsys, "estimate", str(path))[::2], "the file is empty")
    path.write_text("- 1\n- 2\n")  # a list is no mapping, and not empty
    one_error(*cli_in_process(capsys, "estimate", str(path))[::2],
              "a config must be a YAML mapping")


def test_a_near_miss_of_a_bundled_name_is_suggested(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    one_error(*cli_in_process(capsys, "estimate", "llama2_7b")[::2],
              "no bundled example of that name (did you mean 'llama2-7b'?)")
    one_error(*cli_in_process(capsys, "estimate", "qwen3_8b")[::2], "(did you mean 'qwen3-8b'?)")
    line = one_error(*cli_in_process(capsys, "estimate", "nothing-alike")[::2],
                     "; the bundled examples are ")
    assert all(name in line for name in ("llama2-7b", "qwen3-8b", "llemma_7b_4_2_2_P"))
    assert {"llama2-7b", "llama-3.1-8b", "mixtral-8x7b-v0.1"} <= set(bundled_names())


# ------------------------------------------------ 5. NCCL samples of another device


NO_DEVICE = "no measured collectives for device 'H100' in "


def test_samples_of_another_device_are_one_message(capsys):
    code, _, err = cli_in_process(capsys, "estimate", "llama2-7b", "--set",
                                  "cluster.nccl_data=bundled")
    assert code == 0, err
    warnings = [ln for ln in err.splitlines() if ln.startswith("opatlas: warning")]
    (said,) = [w for w in warnings if "collective" in w or "samples" in w]
    assert NO_DEVICE in said and "(it holds NVIDIAA100-SXM4-80GB)" in said
    assert ("times every collective, all_gather on 1×2, 8×4; all_reduce on 1×2; "
            "reduce_scatter on 8×4 (nodes × GPUs per node)") in said
    assert "no measured samples in" not in err
    code, _, err = cli_in_process(capsys, "estimate", "llama2-7b", "--set",
                                  "cluster.nccl_data=bundled", "--strict", *LLAMA_STATED)
    line = one_error(code, err, NO_DEVICE, "(ops.strict: refused)")
    assert said.removeprefix("opatlas: warning: ") in line


@pytest.mark.parametrize("device", ["A100"])
def test_samples_of_the_device_still_list_only_what_they_lack(capsys, device):
    """The folder holds the device: a missing shape is that shape's, not the device's."""
    code, _, err = cli_in_process(capsys, "estimate", "llama2-7b", "--set",
                                  "cluster.nccl_data=bundled", "--set",
                                  f"cluster.device={device}")
    assert code == 0, err
    assert "no measured collectives for device" not in err
    assert "no measured samples in" in err
