"""Review r3 of `opatlas analyze` configs: it reads every input `opatlas estimate` reads (bundled
Hugging Face names, a config.json or its folder, --megatron-args) with the options that shape
the estimate (--gpus, --set ...), says a layout that does not fit in memory, claims
measurements only where some are used, refuses --trace before reading a store, and calls an
estimated step time estimated."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from conftest import REPO, cli_in_process, one_error
from opatlas.analyze import api, sources
from opatlas.analyze.tables import summary_items
from opatlas.estimate import estimate_step
from opatlas.estimate.hf import bundled_hf
from opatlas.estimate.inputs import load_inputs, with_flags
from opatlas.store import Store
from opatlas.store.db import ResultRow

TT = REPO / "tests" / "data" / "tenstorrent"

ARGS = REPO / "examples" / "megatron" / "gpt3-175b.args"


def _estimated(config: str | None, **inputs) -> float:
    """The step time `opatlas estimate` gives for the same input and options."""
    return estimate_step(load_inputs(config, **inputs).config).step_time_s


def _analyze_json(capsys, *args: str) -> tuple[dict, str]:
    code, out, err = cli_in_process(capsys, "analyze", *args, "--json")
    assert code == 0, err
    return json.loads(out), err


def _hf_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "Qwen3-8B"
    folder.mkdir()
    shutil.copy(bundled_hf("qwen3-8b"), folder / "config.json")
    return folder


# ------------------------------------------------ 1. every input `opatlas estimate` reads

@pytest.mark.parametrize("name", ["qwen2.5-7b", "llama-3.1-8b", "qwen3-8b"])
def test_bundled_hugging_face_names_are_configs_with_gpus_and_set(capsys, name):
    assert sources.detect(Path(name)).name == "config"  # "qwen2.5-7b": a dot, no suffix
    doc, _ = _analyze_json(capsys, name, "--gpus", "64", "--set", "parallel.tp=4")
    want = _estimated(name, gpus=64, sets=["parallel.tp=4"])
    assert doc["summary"]["step_time_s"] == pytest.approx(want, rel=1e-12)
    assert doc["summary"]["layout"].startswith("dp16 tp4 pp1")
    assert doc["summary"]["estimate_inputs"] == {"gpus": 64, "sets": ["parallel.tp=4"]}


def test_unknown_name_lists_the_hugging_face_names_too(capsys):
    code, _, err = cli_in_process(capsys, "analyze", "qwen9-1b", "--json")
    line = one_error(code, err, "no such file or folder, nor a bundled config")
    assert "qwen3-8b" in line and "mixtral-8x7b-v0.1" in line and "llama2-7b" in line


def test_a_hugging_face_config_json_and_its_folder_are_detected(capsys, tmp_path):
    folder = _hf_folder(tmp_path)
    assert sources.detect(folder / "config.json").name == "config"
    assert sources.detect(folder).name == "config"
    want = _estimated(str(folder / "config.json"), gpus=8, sets=["model.seq_len=4096"])
    for given in (folder / "config.json", folder):
        doc, _ = _analyze_json(capsys, str(given), "--gpus", "8", "--set", "model.seq_len=4096")
        assert doc["summary"]["step_time_s"] == pytest.approx(want, rel=1e-12)
        assert doc["summary"]["title"].startswith("Qwen3-8B on 8 x")
    # a named kind reads the folder too (it is a config's, not "a folder, but one file")
    doc, _ = _analyze_json(capsys, str(folder), "--kind", "config", "--gpus", "8",
                           "--set", "model.seq_len=4096")
    assert doc["summary"]["step_time_s"] == pytest.approx(want, rel=1e-12)


def test_a_profiler_trace_json_is_still_a_trace(tmp_path):
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": [], "model_type": "llama"}))
    assert sources.detect(trace).name == "trace"


def test_megatron_arguments_as_estimate_takes_them(capsys, tmp_path):
    code, _, err = cli_in_process(capsys, "analyze", str(ARGS), "--json")
    one_error(code, err, f"--megatron-args @{ARGS}")
    code, _, err = cli_in_process(capsys, "analyze", "llama2-7b", "--megatron-args",
                                  f"@{ARGS}", "--json")
    one_error(code, err, "or --megatron-args, not both")
    trace = tmp_path / "m.json"
    doc, _ = _analyze_json(capsys, "--megatron-args", f"@{ARGS}", "--gpus", "1024",
                           "--trace", str(trace))
    want = _estimated(None, megatron_args=f"@{ARGS}", gpus=1024)
    assert doc["summary"]["step_time_s"] == pytest.approx(want, rel=1e-12)
    assert doc["source"] == {"kind": "config", "path": f"@{ARGS}"}
    meta = json.loads(trace.read_text())["metadata"]  # the trace of the same layout
    assert (meta["dp"], meta["tp"], meta["pp"]) == (16, 8, 8)
    assert meta["step_time_s"] == pytest.approx(want, rel=1e-12)


def test_a_saved_analysis_keeps_the_layout_for_its_trace(capsys, tmp_path):
    saved, trace = tmp_path / "a.json", tmp_path / "t.json"
    code, _, err = cli_in_process(capsys, "analyze", "qwen3-8b", "--gpus", "16", "--set",
                                  "parallel.tp=4", "--save", str(saved))
    assert code == 0, err
    code, _, err = cli_in_process(capsys, "analyze", "--load", str(saved), "--trace", str(trace))
    assert code == 0, err
    meta = json.loads(trace.read_text())["metadata"]
    assert (meta["dp"], meta["tp"]) == (4, 4)  # not the config's default dp1 tp1
    code, _, err = cli_in_process(capsys, "analyze", str(saved), "--trace", str(trace))
    assert code == 0, err  # a saved config analysis as the SOURCE is not refused early


def test_the_api_takes_a_dotted_bundled_name_and_traces_the_layout_it_shows(tmp_path):
    a = api.analyze("qwen2.5-7b", extra={"gpus": 8, "sets": ["parallel.tp=2"]})
    assert a.source.kind == "config"
    meta = json.loads(api.write_trace(a, tmp_path / "t.json").read_text())["metadata"]
    assert (meta["dp"], meta["tp"]) == (4, 2)


def test_analytical_as_estimate(capsys):
    doc, _ = _analyze_json(capsys, "llemma_7b_4_2_2_P", "--analytical")
    cfg = with_flags(load_inputs("llemma_7b_4_2_2_P").config, strict=False, analytical=True)
    assert cfg.ops.mode == "analytical" and cfg.cluster.nccl_data is None
    assert doc["summary"]["step_time_s"] == pytest.approx(estimate_step(cfg).step_time_s,
                                                          rel=1e-12)
    assert doc["summary"]["step_time_s"] == pytest.approx(estimate_step(cfg).step_time_s,
                                                          rel=1e-12)


def test_estimate_options_on_another_source_are_said_and_refused_under_strict(capsys,
                                                                              tmp_path):
    store = tmp_path / "s.duckdb"
    with Store(store):
        pass
    code, _, err = cli_in_process(capsys, "analyze", str(store), "--gpus", "8", "--set",
                                  "parallel.tp=2", "--strict", "--json")
    one_error(code, err, "--gpus, --set do not apply to a store source", "--strict")


def test_a_layout_out_of_memory_is_said_and_refused_under_strict(capsys, tmp_path):
    config = _hf_folder(tmp_path) / "config.json"
    doc, err = _analyze_json(capsys, str(config))  # one GPU: 360 GiB of an 80 GB device
    assert doc["summary"]["fits"] is False
    said = [ln for ln in err.splitlines() if "out of memory" in ln]
    assert len(said) == 1 and f"{doc['summary']['memory_gib']:.1f} GiB per GPU" in said[0]
    given = [a for kv in ("training.dtype=bf16", "training.micro_batch=1", "parallel.dp=1",
                          "parallel.tp=1", "parallel.pp=1", "parallel.zero=1",
                          "parallel.recompute=selective", "cluster.preset=dgx-h100",
                          "ops.mode=analytical", "ops.compute_efficiency=0.7",
                          "ops.memory_efficiency=0.8", "model.seq_len=40960",
                          "training.global_batch=102") for a in ("--set", kv)]
    code, _, err = cli_in_process(capsys, "analyze", str(config), "--strict", "--json", *given)
    one_error(code, err, "out of memory", "--strict")  # nothing assumed: only the memory
    doc, err = _analyze_json(capsys, str(config), "--gpus", "8", "--set", "parallel.tp=8",
                             "--set", "model.seq_len=4096")
    assert doc["summary"]["fits"] is True and "out of memory" not in err


# ------------------------------------------------ 2. measurements claimed only when used

def _store_with(path: Path, config: str, op: str, pass_: str, device: str) -> None:
    est = estimate_step(load_inputs(config).config)
    item = next(i for i in est.items if i.name == op and i.pass_ == pass_)
    with Store(path) as st:
        st.add_results([ResultRow("v1", op, json.dumps({**dict(item.shape), "dtype": "bf16"}),
                                  pass_, "cuda", device, "bf16", "ok", repeats=5,
                                  median_ns=2e-3 * 1e9)])


def test_notes_claim_the_measurements_only_when_some_are_used(tmp_path):
    _store_with(tmp_path / "other.duckdb", "llama2-7b", "linear3", "fwd", "A100")
    a = api.analyze("llama2-7b", measured=tmp_path / "other.duckdb")
    notes = " ".join(a.summary["notes"])
    assert "no measurement matches" in notes and "on H100-SXM5-80GB bf16" in notes
    assert "use the measurements" not in notes
    assert summary_items(a)[0][0] == "estimated step time"
    _store_with(tmp_path / "same.duckdb", "llama2-7b", "linear3", "fwd", "NVIDIAH10080GBHBM3")
    a = api.analyze("llama2-7b", measured=tmp_path / "same.duckdb")
    notes = " ".join(a.summary["notes"])
    assert "1 of the rows use the measurements" in notes and "no measurement" not in notes
    assert summary_items(a)[0][0] == "step time (measured where stored)"


# ------------------------------------------------ 3. --trace refused before reading a store

def test_trace_on_a_store_is_refused_before_the_store_is_read(capsys, tmp_path, monkeypatch):
    store = tmp_path / "s.duckdb"
    with Store(store):
        pass
    kind = sources.kinds()["store"]

    def never(path, options):
        raise AssertionError("the store was read")

    monkeypatch.setitem(sources._KINDS, "store", dataclasses.replace(kind, read=never))
    code, _, err = cli_in_process(capsys, "analyze", str(store), "--trace",
                                  str(tmp_path / "t.json"))
    one_error(code, err, "--trace exports an estimated step", "not a store")
    assert not (tmp_path / "t.json").exists()


# ------------------------------------------------ 4. an estimate is labelled as one

def test_the_estimated_step_time_is_labelled_estimated(tmp_path):
    a = api.analyze("llama2-7b")
    assert a.summary["total_time_label"] == "estimated step time"
    assert summary_items(a)[0] == ("estimated step time", summary_items(a)[0][1], None)
    assert not [label for label, _, _ in summary_items(a) if label == "step time"]
    html = api.write_html(a, tmp_path / "r.html").read_text()
    assert '"estimated step time"' in html


def test_a_missing_path_ending_in_a_bundled_name_is_missing(capsys, tmp_path):
    """typo/llama2-7b.yml is a missing file, not the bundled llama2-7b."""
    one_error(*cli_in_process(capsys, "analyze", str(tmp_path / "typo" / "llama2-7b.yml"),
                              "--json")[::2], "no such file or folder")


def test_detection_order_does_not_depend_on_which_source_was_imported_first(tmp_path):
    """A program that imports the config source before the others (as any test module of it
    does) must still have PyBuda claim its netlist YAML, not the config source."""
    import subprocess
    import sys

    code = ("import opatlas.analyze.sources.config\n"
            "from pathlib import Path\n"
            "from opatlas.analyze import sources\n"
            f"print(sources.detect(Path({str(TT / 'resnet50_hifi3_fp16b.netlist.yaml')!r})).name)\n"
            "print(list(sources.kinds())[:3])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=tmp_path).stdout.splitlines()
    assert out == ["pybuda", "['pybuda', 'ttmetal', 'config']"]
