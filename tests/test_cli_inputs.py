"""What a new user meets at the edges of the model and sweep commands: every assumption said,
every bad input one line and exit code 2, nothing written by a command that fails, and a
failed measurement replaced when it is run again."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import REPO, cli_in_process, one_error, write_spec
from opatlas.atomic import write_atomic
from opatlas.errors import OpatlasError
from opatlas.estimate import estimate_step, load_config
from opatlas.estimate.defaults import assumed_defaults
from opatlas.estimate.search import search
from opatlas.run.progress import Progress
from opatlas.samples import bundled_dataset
from opatlas.store import ResultRow, Store

A100 = "NVIDIAA100-SXM4-80GB"
VALIDATION = REPO / "examples" / "validation"


def _unknown_gpu(tmp_path):
    """A config on a GPU the catalog lacks, its samples copied from the A100 ones."""
    data = tmp_path / "gpu"
    data.mkdir()
    for op in ("linear1", "linear2", "linear3", "linear4", "gelu", "layernorm"):
        shutil.copy(bundled_dataset() / "operator" / f"{A100}_{op}_fp16.csv",
                    data / f"MYGPUX1_{op}_fp16.csv")
    cfg = {"model": {"name": "t", "layers": 4, "hidden": 2048, "heads": 16, "seq_len": 2048,
                     "vocab": 50257, "ffn": 8192, "ffn_kind": "gelu", "norm": "layernorm",
                     "attention": "flash"},
           "training": {"global_batch": 8, "micro_batch": 2, "dtype": "fp16"},
           # written out: --strict refuses a default it would assume
           "parallel": {"dp": 2, "tp": 2, "pp": 2, "zero": 1, "recompute": "selective",
                        "sequence_parallel": False, "schedule": "1f1b", "dp_overlap": True,
                        "bucket_mb": 25.0},
           "cluster": {"device": "MYGPUX1", "gpus_per_node": 8, "intra_latency_us": 5.0},
           "ops": {"mode": "data", "data": str(data)}}
    path = tmp_path / "mine.yml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


# -- estimate --------------------------------------------------------------------------------
def test_unknown_gpu_memory_is_said_and_can_be_given(tmp_path, capsys):
    path = _unknown_gpu(tmp_path)
    code, out, err = cli_in_process(capsys, "estimate", path, "--json")
    assert code == 0 and "the memory of MYGPUX1 is unknown" in err
    est = json.loads(out)
    assert est["memory_limit_gib"] is None and any("memory of MYGPUX1" in n for n in est["notes"])
    code, out, err = cli_in_process(capsys, "estimate", path, "--json",
                                    "--set", "cluster.memory_gib=80")
    assert code == 0 and "memory of MYGPUX1" not in err
    assert json.loads(out)["memory_limit_gib"] == pytest.approx(78.0)  # 80 less 2 reserved
    code, _, err = cli_in_process(capsys, "estimate", path, "--strict",
                                  "--set", "ops.data=bundled", "--set", "cluster.device=A100",
                                  # collectives the A100 samples hold (ZeRO-0: all-reduces)
                                  "--set", "cluster.nccl_data=bundled",
                                  "--set", "parallel.zero=0")
    assert code == 0, err  # a catalog device: its memory is known, strict has nothing to refuse


def test_bad_plot_path_fails_before_any_work(tmp_path, capsys):
    code, out, err = cli_in_process(capsys, "estimate", "llama2-7b", "--plot",
                                    str(tmp_path / "x.xyz"))
    assert code == 2 and "unknown figure format '.xyz'" in err and out == ""
    code, _, err = cli_in_process(capsys, "estimate", "llama2-7b", "--plot", str(tmp_path))
    assert code == 2 and "is a folder" in err
    deep = tmp_path / "new" / "dir" / "l7.png"
    code, _, err = cli_in_process(capsys, "estimate", "llama2-7b", "--plot", str(deep))
    assert code == 0 and deep.stat().st_size > 1000, err


@pytest.mark.parametrize("args, needle", [
    (["--tokens", "1e400"], "--tokens"),
    (["--tokens", "2T", "--gpu-hour-price", "inf"], "finite"),
])
def test_infinite_budgets_are_refused(capsys, args, needle):
    one_error(*cli_in_process(capsys, "estimate", "llama2-7b", *args)[::2], needle)


def test_a_bare_hugging_face_config_says_every_default():
    notes = assumed_defaults({"model": {"hf": "qwen2.5-7b"}})
    joined = "\n".join(notes)
    for key in ("training.dtype = bf16", "parallel.tp = 1", "parallel.zero = 1",
                "cluster.device = H100", "cluster.inter_bw_gbps = 50.0", "ops.mode = analytical",
                "ops.compute_efficiency = 0.7"):
        assert key in joined, joined
    searched = "\n".join(assumed_defaults({"model": {"hf": "x"}}, search=True))
    assert "parallel." not in searched and "micro_batch" not in searched
    full = yaml.safe_load((VALIDATION / "gpt-18b.yml").read_text())
    assert assumed_defaults(full) == []


def test_notes_made_before_an_error_are_shown(capsys):
    code, _, err = cli_in_process(capsys, "estimate", "llama-3.1-70b", "--gpus", "512",
                                  "--set", "training.global_batch=100")
    one_error(code, err, "not a multiple", "--set training.global_batch=100")
    assert "assumed model.seq_len = max_position_embeddings" in err.split("opatlas: error")[0]


def test_an_assumed_batch_divides_into_the_layout_of_the_gpus_given(capsys):
    """About 4 Mi tokens: 32 sequences of Llama 3.1's 131,072, a power of two without a
    layout; with --gpus, the multiple of dp·micro-batch nearest it."""
    for args, batch, why in (([], 32, "the power of two"),
                             (["--gpus", "512"], 512, "the multiple of dp·micro-batch = 512"),
                             (["--gpus", "48", "--set", "parallel.tp=2"], 24,  # not 48
                              "the multiple of dp·micro-batch = 24")):
        code, out, err = cli_in_process(capsys, "estimate", "llama-3.1-70b", "--json", *args)
        assert code == 0, err
        layout = json.loads(out)["parallel"]
        assert layout["micro_batches"] * layout["micro_batch"] * layout["dp"] == batch
        assert f"assumed training.global_batch = {batch} sequences ({why} nearest 4 Mi" in err


def test_measured_collectives_missing_a_topology_are_said_and_strict_refuses(capsys):
    sets = ["--set", "cluster.nccl_data=bundled", "--set", "model.attention_dropout=0",
            "--set", "model.hidden_dropout=0", "--set", "model.bias=false",
            "--set", "training.grad_accumulation_fusion=true",  # no roofline ops but the links
            "--set", "model.ffn=9216", "--set", "parallel.bucket_mb=25"]  # no default either
    cfg = str(VALIDATION / "gpt-1.7b.yml")
    code, _, err = cli_in_process(capsys, "estimate", cfg, *sets)
    assert code == 0 and "no measured samples" in err and "all_reduce on 4×8" in err
    one_error(*cli_in_process(capsys, "estimate", cfg, *sets, "--strict")[::2],
               "all_reduce on 4×8", "ops.strict")
    one_error(*cli_in_process(capsys, "estimate", cfg, "--set",
                               "cluster.nccl_data=/no/such/folder")[::2],
               "cluster.nccl_data", "no such folder")


def test_strict_on_an_analytical_config_says_it_has_nothing_to_refuse(capsys):
    code, _, err = cli_in_process(capsys, "estimate", "llama2-7b", "--strict",
                                  # what the bundled config leaves to the defaults, stated
                                  "--set", "model.attention=flash",
                                  "--set", "parallel.dp_overlap=true",
                                  "--set", "parallel.bucket_mb=25",
                                  "--set", "cluster.intra_latency_us=5",
                                  "--set", "cluster.inter_latency_us=10")
    assert code == 0 and "ops.mode is analytical" in err


def test_search_keeps_what_set_pins_and_explains_an_empty_result(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # the table unwrapped
    cfg = load_config("llama2-7b")
    best, _, _ = search(cfg.model_copy(update={"parallel": cfg.parallel.model_copy(
        update={"tp": 4})}), 64, top=50, fixed={"parallel.tp": 4})
    assert best and {e.config.parallel.tp for e in best} == {4}
    code, _, err = cli_in_process(capsys, "estimate", "llama2-7b", "--search", "--gpus", "64",
                                  "--set", "parallel.tp=4", "--top", "3", "--json")
    assert code == 0 and "--search keeps parallel.tp = 4" in err
    one_error(*cli_in_process(capsys, "estimate", "llama2-7b", "--search", "--gpus", "1")[::2],
               "none of the", "the leanest", "needs")
    code, out, _ = cli_in_process(capsys, "estimate", "llama2-7b", "--search", "--gpus", "64",
                                  "--tokens", "1T", "--top", "2")
    assert code == 0 and "same time and memory" in out and "selective" in out


def test_a_set_that_changes_the_gpu_count_says_so(capsys):
    code, _, err = cli_in_process(capsys, "estimate", "llama2-7b", "--set", "parallel.tp=4")
    assert code == 0 and "GPU count from 64 to 128" in err


@pytest.mark.parametrize("args, needles", [
    (["--bf16", "--fp16"], ("--bf16 and --fp16",)),
    (["--bf16", "--pipeline-model-parallel-size", "4", "--num-virtual-stages-per-pipeline-rank",
      "4"], ("6 layers of a stage", "4 virtual stages")),
])
def test_megatron_arguments_megatron_refuses_are_refused(capsys, args, needles):
    base = ("--num-layers 24 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 "
            "--max-position-embeddings 2048 --micro-batch-size 1 --global-batch-size 64 "
            "--vocab-size 50257 ")
    one_error(*cli_in_process(capsys, "estimate", "--megatron-args", base + " ".join(args),
                               "--gpus", "8")[::2], *needles)


def test_a_torchrun_world_is_fixed_or_refused(capsys):
    args = ("--num-layers 24 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 "
            "--max-position-embeddings 2048 --micro-batch-size 1 --global-batch-size 64 "
            "--vocab-size 50257 --bf16")
    one_error(*cli_in_process(capsys, "estimate", "--megatron-args",
                               f"torchrun --nnodes=2:4 --nproc-per-node=8 pretrain_gpt.py {args}"
                               )[::2], "--nnodes", "2:4")
    code, out, err = cli_in_process(capsys, "estimate", "--megatron-args",
                                    f"torchrun --nnodes=8 --nproc-per-node=8 x.py {args}",
                                    "--gpus", "32", "--json")
    assert code == 0 and "--gpus 32 replaces the launcher's 8 node(s) × 8 = 64 GPUs" in err
    assert json.loads(out)["gpus"] == 32


def test_config_inputs_a_model_folder_and_bad_json(tmp_path, capsys):
    folder = tmp_path / "qwen"
    folder.mkdir()
    shutil.copy(REPO / "src" / "opatlas" / "data" / "hf" / "qwen2.5-7b.json",
                folder / "config.json")
    code, out, err = cli_in_process(capsys, "estimate", str(folder), "--json")
    assert code == 0 and json.loads(out)["step_time_s"] > 0, err
    assert "hidden_size" in err  # the fields read, as for the file itself
    bad = tmp_path / "bad.json"
    bad.write_text('{"a": 1,, }')
    one_error(*cli_in_process(capsys, "estimate", str(bad))[::2], "not valid JSON",
               "line 1, column 9")


# -- predict and fit -------------------------------------------------------------------------
@pytest.mark.parametrize("args, needle", [
    (["--recipe", "gbmx"], "--recipe 'gbmx'"),
    (["--shape", "b=0"], "b is a size"),
])
def test_predict_refuses_bad_recipes_and_zero_sizes(capsys, args, needle):
    shape = ["--shape", "mp=2", "--shape", "l=4096", "--shape", "dim=4096"]
    if "--shape" not in args:
        shape += ["--shape", "b=4"]
    one_error(*cli_in_process(capsys, "predict", "linear1", *shape, *args)[::2], needle)


@pytest.mark.parametrize("args, needles", [
    (["--op", "linaer1"], ("--op linaer1", "linear1")),
    (["--op", "linear1", "--split", "extrapolate:foo:0.2"], ("'foo'", "dim")),
])
def test_fit_names_what_it_cannot_find(capsys, args, needles):
    one_error(*cli_in_process(capsys, "fit", *args)[::2], *needles)


# -- sweeps, stores and files ----------------------------------------------------------------
def test_a_failed_row_is_replaced_by_a_later_outcome(tmp_path):
    def row(status: str, median: float | None) -> ResultRow:
        r = ResultRow(vector_id="v" * 56, op="linear", params_json="{}", pass_="fwd",
                      backend="cpu", device="d", dtype="fp32", status=status, message=status,
                      versions_json="{}")
        r.median_ns = median
        return r

    with Store(tmp_path / "s.duckdb") as st:
        assert st.add_results([row("timeout", None)]) == 1
        assert st.add_results([row("ok", 5.0)]) == 1  # the retry's answer replaces it
        assert st.add_results([row("error", None)]) == 0  # an answer is never replaced
        res = st.results()
    assert list(res["status"]) == ["ok"] and list(res["median_ns"]) == [5.0]


def test_bad_where_or_backend_option_leaves_no_store(tmp_path, capsys):
    spec = str(REPO / "examples" / "specs" / "linear.yml")
    store = tmp_path / "s.duckdb"
    for args, needle in ((["--where", "dimm > 3"], "dimm"), (["--where", "dim >"], "dim >"),
                         (["--backend-opt", "foo=1"], "foo")):
        one_error(*cli_in_process(capsys, "run", spec, "--store", str(store), *args)[::2],
                   needle)
        assert not store.exists()
    one_error(*cli_in_process(capsys, "sweep", "expand", spec, "--where", "x.y")[::2], "x.y")


def test_a_parameter_the_op_does_not_take_is_said(tmp_path, capsys):
    spec = write_spec(tmp_path / "s.yml", {"op": "linear", "params": {
        "role": ["qkv"], "mp": [1], "b": [1], "l": [128], "dim": [512], "foo": [1, 2]}})
    code, out, err = cli_in_process(capsys, "sweep", "expand", str(spec))
    assert code == 0 and "takes no parameter foo" in err and "2 vectors" in out


def test_results_and_imports_at_the_edges(tmp_path, capsys):
    from opatlas.sweep.expand import vector_id

    store = tmp_path / "s.duckdb"
    with Store(store) as st:
        st.add_results([ResultRow(vector_id=vector_id("linear", {"b": 1}), op="linear",
                                  params_json='{"b": 1}',
                                  pass_="fwd", backend="cpu", device="d", dtype="fp32",
                                  status="ok", message="", versions_json="{}")])
    nested = tmp_path / "new" / "r.json"
    code, _, err = cli_in_process(capsys, "results", "--store", str(store), "--format", "json",
                                  "--out", str(nested))
    assert code == 0 and len(json.loads(nested.read_text())) == 1, err
    assert stat.S_IMODE(nested.stat().st_mode) == 0o666 & ~_umask()
    other = tmp_path / "o.duckdb"
    code, out, err = cli_in_process(capsys, "import", "results", str(nested), "--store",
                                    str(other))
    assert code == 0 and "added 1 rows" in out, err
    fresh = tmp_path / "fresh.duckdb"
    for path, needle in ((tmp_path / "none.parquet", "no such file"),
                         (store, "is a store, not an export")):
        one_error(*cli_in_process(capsys, "import", "results", str(path), "--store",
                                   str(fresh))[::2], needle)
        assert not fresh.exists()
    one_error(*cli_in_process(capsys, "results", "--store", str(tmp_path))[::2], "is a folder")
    code, _, err = cli_in_process(capsys, "results", "--store", str(store), "--op", "lineer")
    assert code == 2 and "no op 'lineer'; it has linear" in err


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_atomic_files_get_the_usual_mode(tmp_path):
    path = write_atomic(tmp_path / "x.txt", "hello")
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~_umask()


def test_progress_logs_on_time_as_well_as_on_count(monkeypatch):
    import io

    import opatlas.run.progress as progress

    monkeypatch.setattr(progress, "LOG_SECONDS", 0.0)
    stream = io.StringIO()
    with Progress(1000, label="x", interactive=False, log_every=100, stream=stream) as p:
        p.advance("ok")
        p.advance("ok")
    assert stream.getvalue().count("| 1/1000=") == 1 and "| 2/1000=" in stream.getvalue()


def test_validation_script_refuses_unknown_runs_and_flags():
    from test_validation import _validator

    mod = _validator()
    for argv in (["gpt-2b"], ["--jsn"]):
        with pytest.raises(SystemExit) as exc:
            mod.main(argv)
        assert exc.value.code == 2


def test_estimate_engine_errors_are_opatlas_errors(tmp_path):
    cfg = load_config(_unknown_gpu(tmp_path))
    strict = cfg.model_copy(update={"ops": cfg.ops.model_copy(update={"strict": True})})
    with pytest.raises(OpatlasError):
        estimate_step(strict)


def test_a_fractional_size_in_a_spec_is_refused(tmp_path, capsys):
    spec = write_spec(tmp_path / "s.yml", {"op": "linear", "params": {
        "role": ["qkv"], "mp": [1], "b": [1], "l": {"start": 128, "step": 0.5, "end": 130},
        "dim": [512]}})
    one_error(*cli_in_process(capsys, "sweep", "expand", str(spec))[::2], "params.l", "128.5",
              "whole number")


def _one_row_store(path: Path) -> Path:
    with Store(path) as st:
        st.add_results([ResultRow(vector_id="b" * 56, op="linear", params_json='{"b": 1}',
                                  pass_="fwd", backend="cpu", device="d", dtype="fp32",
                                  status="ok", message="", versions_json="{}")])
    return path


def test_results_format_follows_the_out_files_extension(tmp_path, capsys):
    store = _one_row_store(tmp_path / "s.duckdb")
    for name, read in (("r.csv", pd.read_csv), ("r.parquet", pd.read_parquet),
                       ("r.json", pd.read_json)):
        code, _, err = cli_in_process(capsys, "results", "--store", str(store), "--out",
                                      str(tmp_path / name))
        assert code == 0, err
        assert list(read(tmp_path / name)["op"]) == ["linear"]
    one_error(*cli_in_process(capsys, "results", "--store", str(store), "--format", "csv",
                              "--out", str(tmp_path / "x.parquet"))[::2],
              "x.parquet is a .parquet file but --format is csv")
    assert not (tmp_path / "x.parquet").exists()
    a_file = tmp_path / "notes"
    a_file.write_text("mine")
    one_error(*cli_in_process(capsys, "results", "--store", str(store), "--format", "ett",
                              "--out", str(a_file))[::2], "writes a folder", "is a file")
    assert a_file.read_text() == "mine"


@pytest.mark.parametrize(("args", "needles"), [
    (["bound", "gemm", "4096", "4096"], ["opatlas bound gemm", "Missing argument 'N'",
                                         "--help"]),
    (["bound", "gemm", "4096", "0", "4096"], ["Invalid value for 'K'"]),
    (["estiamte"], ["No such command 'estiamte'", "Did you mean 'estimate'"]),
    (["estimate", "llama2-7b", "--top", "0"], ["'--top'"]),
])
def test_usage_errors_are_one_line(capsys, args, needles):
    one_error(*cli_in_process(capsys, *args)[::2], *needles)


def test_an_output_that_cannot_be_made_is_one_line(tmp_path, capsys):
    a_file = tmp_path / "f"
    a_file.write_text("x")
    one_error(*cli_in_process(capsys, "bound", "figures", str(a_file / "figs"))[::2],
              str(a_file / "figs"))


def test_an_unknown_backend_option_names_the_ones_it_takes(tmp_path, capsys):
    spec = write_spec(tmp_path / "s.yml", {"op": "linear", "params": {
        "role": ["qkv"], "mp": [1], "b": [1], "l": [128], "dim": [512]}})
    store = tmp_path / "s.duckdb"
    one_error(*cli_in_process(capsys, "run", str(spec), "--backend-opt", "thread=1",
                              "--store", str(store))[::2], "unknown option(s) thread",
              "it takes threads")
    assert not store.exists()


def test_an_option_is_not_called_a_file(capsys):
    one_error(*cli_in_process(capsys, "estimate", "llama2-7b", "--set", "parallel.tpp=2")[::2],
              "In --set, key 'parallel.tpp'")


def test_a_where_that_selects_nothing_is_an_error_and_writes_no_store(tmp_path, capsys):
    spec = write_spec(tmp_path / "s.yml", {"op": "linear", "params": {
        "role": ["qkv"], "mp": [1], "b": [1], "l": [128], "dim": [512, 1024]}})
    store = tmp_path / "s.duckdb"
    one_error(*cli_in_process(capsys, "run", str(spec), "--where", "dim == 7", "--store",
                              str(store))[::2], "--where 'dim == 7' selects no valid vector")
    assert not store.exists()
    code, out, err = cli_in_process(capsys, "run", str(spec), "--where", "dim == 512",
                                    "--store", str(store), "--repeats", "1")
    assert code == 0 and ": 1 vector; 0 already in the store" in out, err


def test_virtual_stages_need_the_interleaved_schedule_and_equal_chunks(capsys):
    pp = ["--set", "parallel.pp=4", "--set", "parallel.dp=8"]
    one_error(*cli_in_process(capsys, "estimate", "llama2-7b", *pp, "--set",
                              "parallel.virtual_stages=4")[::2],
              "virtual_stages 4 needs schedule: interleaved (1f1b runs one chunk")
    one_error(*cli_in_process(capsys, "estimate", "llama2-7b", *pp, "--set",
                              "parallel.virtual_stages=3", "--set",
                              "parallel.schedule=interleaved")[::2],
              "layers (32) to split into pp·virtual_stages = 12 equal chunks")
    code, out, err = cli_in_process(capsys, "estimate", "llama2-7b", *pp, "--set",
                                    "parallel.virtual_stages=2", "--set",
                                    "parallel.schedule=interleaved", "--json")
    assert code == 0 and json.loads(out)["layers_per_stage"] == [8, 8, 8, 8], err


@pytest.mark.parametrize(("override", "needle"), [
    ("model.seq_len=100000000000000000000", "less than or equal to 16777216"),
    ("model.hidden=10000000000000000000", "less than or equal to 131072"),
    ("model.layers=true", "expected a number, not true"),
    ("parallel.pp=false", "expected a number, not false"),
    ("cluster.intra_bw_gbps=true", "expected a number, not true"),
    ("training.micro_batch=8192", "8192 × seq_len 4096 tokens exceeds 16,777,216"),
])
def test_absurd_sizes_and_booleans_for_numbers_are_refused(capsys, override, needle):
    """Sizes beyond any model would overflow the ops' 64-bit counts (an MFU of 178% was
    printed); YAML's true/false would be taken as 1/0."""
    key = override.partition("=")[0]
    one_error(*cli_in_process(capsys, "estimate", "llama2-7b", "--set", override)[::2],
              needle, key)


def test_a_device_outside_the_catalog_is_named_by_its_key_in_analytical_mode(capsys):
    one_error(*cli_in_process(capsys, "estimate", "llama2-7b", "--set",
                              "cluster.device=Z9000")[::2],
              "cluster.device 'Z9000' is not in the device catalog", "A100-SXM4-80GB",
              "ops.mode analytical")


def test_a_negative_degree_is_refused_without_a_note_on_negative_gpus(capsys):
    code, _, err = cli_in_process(capsys, "estimate", "llama2-7b", "--set", "parallel.tp=-2")
    one_error(code, err, "key 'parallel.tp', value -2", "greater than 0")
    assert "GPU count" not in err


def test_a_sweep_spec_given_as_a_training_config_is_named_as_such(capsys):
    for spec in ("examples/specs/linear.yml", "tests/data/ett_linear1.yml"):
        path = str(REPO / spec)
        for cmd in ("estimate", "analyze"):
            one_error(*cli_in_process(capsys, cmd, path)[::2], f"In file {path}",
                      "this is a sweep spec (what `opatlas run` measures)")
