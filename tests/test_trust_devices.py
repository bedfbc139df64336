"""Device names and fallbacks (issue 13, item 1): any alias of a catalog device finds data filed
under any other; data mode never degrades silently; devices outside the catalog work from their
own data; the GH200 variants are in the catalog."""

from __future__ import annotations

import json
import shutil
import warnings

import numpy as np
import pandas as pd
import pytest
import yaml

from conftest import run_cli
from opatlas.devices import device_key, empirical_device, get_device, same_device
from opatlas.errors import OpatlasError
from opatlas.estimate import estimate_step, load_config
from opatlas.estimate.optimes import RooflineFallbackWarning
from opatlas.fit.data import UnknownDeviceWarning, data_device, load_op_data, op_counts
from opatlas.predict import Predictor
from opatlas.samples import bundled_dataset, filed_device_name

A100 = "NVIDIAA100-SXM4-80GB"
MODEL = {"name": "t", "layers": 4, "hidden": 2048, "heads": 16, "seq_len": 2048}


def _config(tmp_path, device: str, name: str = "c", **model) -> str:
    # the defaults that shape the estimate written out: --strict refuses one it would assume
    stated = {"vocab": 50257, "ffn": 8192, "ffn_kind": "gelu", "norm": "layernorm",
              "attention": "flash"}
    cfg = {"model": {**MODEL, **stated, **model},
           "training": {"global_batch": 8, "micro_batch": 2, "dtype": "fp16"},
           "parallel": {"dp": 2, "tp": 2, "pp": 2, "zero": 1, "recompute": "selective",
                        "sequence_parallel": False, "schedule": "1f1b", "dp_overlap": True,
                        "bucket_mb": 25.0},
           "cluster": {"device": device, "gpus_per_node": 4, "nccl_data": "bundled"},
           "ops": {"mode": "data", "data": "bundled"}}
    path = tmp_path / f"{name}.yml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def test_aliases_resolve_to_one_key():
    assert device_key("A100") == device_key(A100) == device_key("NVIDIA A100-SXM4-80GB")
    assert same_device("a100", A100) and not same_device("H100", A100)
    assert device_key("MyGPU 9000") == "MyGPU9000"  # unknown: the name without spaces


def test_gh200_variants_in_the_catalog():
    vista = get_device("NVIDIAGH200120GB")  # the name torch reports on TACC Vista
    assert vista is get_device("NVIDIA GH200 480GB") and vista.bandwidth == 4.0e12
    assert vista.peak("bf16") == pytest.approx(989.4e12) and vista.memory_bytes == 96 * 2**30
    hbm3e = get_device("GH200-144GB")
    assert hbm3e.bandwidth == 4.9e12 and hbm3e.memory_bytes == 144 * 2**30
    assert "datasheet" in vista.source and "datasheet" in hbm3e.source


def test_predictor_finds_data_under_any_alias():
    shape = {"mp": [2], "b": [4], "l": [2048], "dim": [4096]}
    full = Predictor.shared(device=A100).predict("linear1", shape)
    for alias in ("A100", "NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB"):
        assert Predictor.shared(device=alias).predict("linear1", shape) == pytest.approx(full)


def test_estimate_with_short_device_name_uses_the_data(tmp_path):
    short = estimate_step(load_config(_config(tmp_path, "A100", "short")))
    full = estimate_step(load_config(_config(tmp_path, A100, "full")))
    assert short.step_time_s == pytest.approx(full.step_time_s, rel=1e-12)
    assert short.breakdown == pytest.approx(full.breakdown, rel=1e-12)
    assert short.notes == [] and full.notes == []  # every op of this model has data
    analytical = load_config(_config(tmp_path, "A100", "roof"))
    analytical = analytical.model_copy(update={"ops": analytical.ops.model_copy(
        update={"mode": "analytical"})})
    assert estimate_step(analytical).step_time_s != pytest.approx(short.step_time_s, rel=1e-3)


def test_measured_collectives_found_under_an_alias():
    folder = bundled_dataset() / "nccl"
    assert filed_device_name(folder, "A100") == A100
    with pytest.warns(UserWarning, match="alpha-beta"):
        assert filed_device_name(folder, "H100") == "H100"


def test_no_data_for_the_device_names_what_the_data_holds(tmp_path):
    with pytest.raises(OpatlasError, match=f"holds: {A100} fp16") as err:
        estimate_step(load_config(_config(tmp_path, "H100")))
    assert "analytical" in str(err.value)
    proc = run_cli("estimate", _config(tmp_path, "H100"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"{A100} fp16" in proc.stderr


def test_missing_ops_warn_and_strict_fails(tmp_path):
    cfg = load_config(_config(tmp_path, "A100", ffn_kind="swiglu", ffn=5632))
    with pytest.warns(RooflineFallbackWarning, match="swiglu/bwd, swiglu/fwd on A100 fp16"):
        est = estimate_step(cfg)
    assert est.notes == ["op swiglu/bwd has no measured data; roofline used",
                         "op swiglu/fwd has no measured data; roofline used"]
    strict = cfg.model_copy(update={"ops": cfg.ops.model_copy(update={"strict": True})})
    with pytest.raises(OpatlasError, match="strict: no measured data for swiglu/bwd"):
        estimate_step(strict)
    path = _config(tmp_path, "A100", "sw", ffn_kind="swiglu", ffn=5632)
    loose = run_cli("estimate", path, "--json")
    assert loose.returncode == 0 and "opatlas: warning: no measured data for swiglu" in \
        loose.stderr
    assert "has no measured data" in " ".join(json.loads(loose.stdout)["notes"])
    proc = run_cli("estimate", path, "--strict")
    assert proc.returncode == 2 and "swiglu" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_upstream_gh200_example_loads_and_works_with_its_data(tmp_path):
    ops = tmp_path / "regressors" / "Vista" / "operator"
    ops.mkdir(parents=True)
    for op in ("linear1", "middleStage_optimizer"):
        shutil.copy(bundled_dataset() / "operator" / f"{A100}_{op}_fp16.csv",
                    ops / f"NVIDIAGH200120GB_{op}_fp16.csv")
    example = {"gpu_name": "NVIDIAGH200120GB", "operator_data_folder": "./regressors/Vista/operator",
               "nccl_data_folder": "./regressors/Vista/nccl",
               "training_config": [4, 2, 2, 4, 32, 4096, 4096, 8, 1], "comm_bucket": 1260000000,
               "encoders": 32, "layernorm_name": "RMSlayernorm",
               "encoder_function_list": ["RMSlayernorm", "linear1", "RoPE", "flash_atten"]}
    path = tmp_path / "llemma_7b_4_2_2_V.yml"
    path.write_text(yaml.safe_dump(example))
    cfg = load_config(path)
    assert get_device(cfg.cluster.device).name == "GH200-96GB"
    assert cfg.ops.data == str(ops.resolve())
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        est = estimate_step(cfg)
    assert est.memory_limit_gib == pytest.approx(94.0)  # 96 GiB less the reserve
    assert not any("linear1" in n for n in est.notes)  # from the GH200-named samples
    assert "op flash_atten/fwd has no measured data; roofline used" in est.notes
    assert any("no measured collectives" in str(w.message) for w in said)
    with pytest.raises(OpatlasError, match="no fp16 samples for device 'NVIDIAGH200120GB'"):
        estimate_step(cfg.model_copy(update={"ops": cfg.ops.model_copy(
            update={"data": "bundled"})}))


def test_an_ett_data_folder_that_is_not_there_is_said_and_strict_refuses(tmp_path, capsys):
    """A mistyped operator_data_folder must not quietly become the bundled samples; upstream's
    own Perlmutter folders are those samples, so naming them is no substitute."""
    from conftest import cli_in_process, one_error

    example = {"operator_data_folder": "./regressors/Perlmuter/operator",  # a typo
               "nccl_data_folder": "./regressors/Perlmutter/nccl",
               "training_config": [2, 2, 1, 4, 32, 4096, 4096, 2, 4], "encoders": 8,
               "layernorm_name": "RMSlayernorm",
               "encoder_function_list": ["RMSlayernorm", "linear1", "RoPE", "flash_atten"]}
    path = tmp_path / "typo.yml"
    path.write_text(yaml.safe_dump(example))
    code, out, err = cli_in_process(capsys, "estimate", str(path), "--json")
    said = (f"operator_data_folder ./regressors/Perlmuter/operator is not a folder as given nor "
            f"next to the config in {tmp_path}: the bundled A100 samples are used instead")
    assert code == 0 and said in err and "nccl_data_folder" not in err, err
    assert said in json.loads(out)["assumptions"]
    one_error(*cli_in_process(capsys, "estimate", str(path), "--strict")[::2],
              f"In file {path}, key 'operator_data_folder'", "--strict refuses")


@pytest.mark.slow
def test_unknown_device_is_described_by_its_own_data(tmp_path):
    src = bundled_dataset() / "operator"
    for op in ("linear1", "gelu"):
        shutil.copy(src / f"{A100}_{op}_fp16.csv", tmp_path / f"MyGPU_{op}_fp16.csv")
    data = load_op_data(tmp_path)
    with pytest.warns(UnknownDeviceWarning, match="'MyGPU' is not in the catalog"):
        dev = data_device(data, "MyGPU", "fp16")
    flops, nbytes = op_counts(data, "fp16")
    seconds = data["y_us"].to_numpy() * 1e-6
    assert dev.peak("fp16") == pytest.approx(np.nanmax(flops / seconds))
    assert dev.bandwidth == pytest.approx(np.nanmax(nbytes / seconds))
    assert 100e12 < dev.peak("fp16") < 312e12  # below the A100's datasheet peak, as measured
    ref = empirical_device("x", np.array([4e12, 1e9]), np.array([1e6, 8e9]),
                           np.array([0.02, 0.004]), "fp16")
    assert ref.peak("fp16") == pytest.approx(2e14) and ref.bandwidth == pytest.approx(2e12)
    proc = run_cli("fit", "--data", str(tmp_path), "--op", "gelu", "--no-baseline", "--json")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("not in the catalog") == 1
    assert json.loads(proc.stdout)[0]["mape"] < 0.1
    assert isinstance(pd.DataFrame(json.loads(proc.stdout)), pd.DataFrame)
