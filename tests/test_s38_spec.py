"""s38: unknown ``fixed`` keys, the value cap of ``mul`` ranges, and ``passes`` checked at load."""

from __future__ import annotations

import math
import warnings

import pytest
from pydantic import ValidationError

from opatlas.errors import OpatlasError, SpecError
from opatlas.run.runner import RunConfig, measurement
from opatlas.spec import ParamRange, spec_from_mapping
from opatlas.spec.model import MAX_RANGE_VALUES, SweepSpec

LINEAR = {"op": "linear", "dtype": "fp16",
          "params": {"b": [1], "l": [128], "dim": [1024]}}


def _spec(**extra: object) -> dict[str, object]:
    return {**LINEAR, **extra}


def test_a_misspelt_fixed_key_is_an_error_naming_file_key_and_nearest_parameter():
    with pytest.raises(SpecError) as info:
        spec_from_mapping(_spec(fixed={"rol": "out", "fnn": 1024}), file="s.yml")
    err = info.value
    assert (err.file, err.key, err.value) == ("s.yml", "fixed.rol", "out")
    assert err.detail.startswith("op 'linear' takes no parameter 'rol'; did you mean 'role' "
                                 "for 'rol'? (it takes b, l, dim, mp, role")
    assert str(err).startswith("In file s.yml, key 'fixed.rol', value 'out': ")


def test_a_fixed_key_the_op_takes_still_loads():
    spec = spec_from_mapping(_spec(fixed={"role": "out", "ffn": 1024}), file="s.yml")
    assert spec.fixed == {"role": "out", "ffn": 1024}


def test_an_unknown_params_axis_is_still_warned_of_now_with_the_nearest_parameter():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        spec_from_mapping(_spec(params={**LINEAR["params"], "rol": ["out"]}), file="s.yml")
    said = [str(w.message) for w in caught]
    assert len(said) == 1 and "takes no parameter rol" in said[0]
    assert said[0].endswith("; did you mean 'role' for 'rol'?")


@pytest.mark.parametrize(("start", "step", "end"), [
    (1, 2, 1000), (1, 2, 1024), (1, 3, 8), (5, 5, 5), (0.5, 1.5, 100.0), (1, 1.1, 2.0),
    (3, 10, 3e12), (1, 1.000001, 1.01)])
def test_mul_count_matches_the_materialised_values(start, step, end):
    rng = ParamRange(start=start, step=step, end=end, mode="mul")
    assert rng.mul_count() == len(rng.values())


def test_mul_count_golden_values():
    assert ParamRange(start=1, step=2, end=1000, mode="mul").mul_count() == 10  # 1..512
    assert ParamRange(start=1, step=2, end=1024, mode="mul").mul_count() == 11  # end included
    # log(1000)/log(10) is 2.9999999999999996 in floats: the estimate alone would say 3
    assert math.floor(math.log(1000) / math.log(10)) == 2
    assert ParamRange(start=1, step=10, end=1000, mode="mul").mul_count() == 4


def test_mul_range_is_capped_at_the_same_count_as_add():
    step = 1.000001
    at_cap = ParamRange(start=1, step=step, end=step ** (MAX_RANGE_VALUES - 1), mode="mul")
    assert at_cap.mul_count() == MAX_RANGE_VALUES
    for end in (step ** MAX_RANGE_VALUES, 1000):  # one value over; the report's ~6.9 M
        with pytest.raises(ValidationError, match=f"range has more than {MAX_RANGE_VALUES} "
                                                  f"values"):
            ParamRange(start=1, step=step, end=end, mode="mul")


def test_a_huge_mul_range_in_a_spec_is_the_same_error_as_an_add_one():
    msgs = []
    for rng in ({"start": 1, "step": 1.000001, "end": 1000, "mode": "mul"},
                {"start": 1, "step": 1, "end": 2_000_000}):
        with pytest.raises(SpecError) as info:
            spec_from_mapping(_spec(params={"b": [1], "l": [128], "dim": rng}), file="s.yml")
        assert (info.value.file, info.value.key) == ("s.yml", "params.dim")
        msgs.append(info.value.detail)
    assert msgs[0] == msgs[1] == f"range has more than {MAX_RANGE_VALUES} values"


@pytest.mark.parametrize(("passes", "bad"), [(["step"], "step"), (["fwd", "step"], "step")])
def test_a_pass_the_op_lacks_is_refused_at_load(passes, bad):
    with pytest.raises(SpecError) as info:
        spec_from_mapping(_spec(passes=passes), file="s.yml")
    err = info.value
    assert (err.file, err.key, err.value) == ("s.yml", "passes", bad)
    assert err.detail == "op 'linear' has no pass 'step'; its passes are fwd, bwd"


def test_passes_the_op_has_load_and_are_measured():
    spec = spec_from_mapping(_spec(passes=["bwd"]), file="s.yml")
    assert measurement(spec, RunConfig()).passes == ("bwd",)


def test_runner_names_the_passes_asked_for_not_the_configs_none():
    spec = SweepSpec.model_validate(_spec(name="s", passes=["step"]))  # past the loader's check
    with pytest.raises(OpatlasError, match=r"none of the passes \['step'\]; it has "
                                           r"\['fwd', 'bwd'\]"):
        measurement(spec, RunConfig())


def test_a_run_config_asking_for_a_pass_the_op_lacks_is_refused_not_narrowed():
    spec = spec_from_mapping(_spec(), file="s.yml")
    with pytest.raises(OpatlasError, match=r"op 'linear' has no pass 'bwdd' of the passes "
                                           r"\['fwd', 'bwdd'\]; it has \['fwd', 'bwd'\]"):
        measurement(spec, RunConfig(passes=["fwd", "bwdd"]))
    assert measurement(spec, RunConfig(passes=["bwd"])).passes == ("bwd",)
