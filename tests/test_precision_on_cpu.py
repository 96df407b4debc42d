"""``memory.autocast=auto`` (:mod:`corl_bench.train.precision`): bf16 only where the CPU has bf16 instructions and a
bf16 product measured faster, fp32 elsewhere; resolved once by ``resolve`` and written into the resolved config with
the reason, the fast engine's copy following it unless its dtype was set."""

from __future__ import annotations

import pytest

from corl_bench.config import ConfigError, load_config
from corl_bench.train import precision
from corl_bench.train.memory import autocast
from corl_bench.train.runner import resolve


def test_a_cpu_without_bf16_instructions_stays_in_fp32_on_cpu() -> None:
    choice = precision.choose("cpu", flags={"avx2", "fma"})
    assert choice.autocast == "off" and "no bf16 instructions" in choice.reason and choice.speedup is None


def test_bf16_flags_alone_choose_bf16_without_measuring_on_cpu() -> None:
    choice = precision.choose("cpu", flags={"avx2", "avx512_bf16"}, measure=False)
    assert choice.autocast == "bfloat16" and choice.flags == ("avx512_bf16",)


def test_a_measured_choice_follows_the_measured_gain_on_cpu() -> None:
    """On this machine's own CPU: whatever it has, the choice agrees with the flags and the measured ratio."""
    choice = precision.choose("cpu")
    if not choice.flags:
        assert choice.autocast == "off"
    elif choice.speedup is not None:
        assert (choice.autocast == "bfloat16") == (choice.speedup >= precision.MIN_GAIN)
        assert "GFLOP/s" in choice.reason


def test_the_gain_rule_refuses_a_slow_bf16_on_cpu(monkeypatch) -> None:
    rates = {"float32": 100.0, "bfloat16": 110.0}  # an emulating CPU that still reports the flag
    monkeypatch.setattr(precision, "matmul_rate", lambda dtype, *a, **k: rates[dtype])
    choice = precision.choose("cpu", flags={"avx512_bf16"})
    assert choice.autocast == "off" and "1.1x" in choice.reason and choice.speedup == pytest.approx(1.1)


@pytest.mark.parametrize("picked", ["bfloat16", "off"])
def test_resolve_writes_the_choice_and_its_reason_into_the_plan_on_cpu(monkeypatch, picked) -> None:
    monkeypatch.setattr(precision, "choose", lambda *a, **k: precision.Choice(picked, "because"))
    plan = resolve(load_config(None, ["memory.autocast=auto", "rollout.backend=fast"]))
    assert plan.config.memory.autocast == picked
    assert any(n.startswith(f"memory.autocast={picked} (auto: because)") for n in plan.notes)
    dtype = dict(plan.config.rollout.engine_options).get("dtype")
    assert dtype == ("bfloat16" if picked == "bfloat16" else None)


def test_an_engine_dtype_the_user_set_wins_over_auto_on_cpu(monkeypatch) -> None:
    monkeypatch.setattr(precision, "choose", lambda *a, **k: precision.Choice("bfloat16", "because"))
    plan = resolve(load_config(None, ["memory.autocast=auto", "rollout.backend=fast",
                                      "rollout.engine_options={dtype: float32}"]))
    assert plan.config.memory.autocast == "bfloat16"
    assert dict(plan.config.rollout.engine_options) == {"dtype": "float32"}


def test_the_default_run_keeps_fp32_without_measuring_on_cpu(monkeypatch) -> None:
    monkeypatch.setattr(precision, "choose", lambda *a, **k: pytest.fail("the default must not measure"))
    assert resolve(load_config(None, [])).config.memory.autocast == "off"


def test_an_unknown_setting_is_refused_in_one_line_and_auto_never_reaches_training_on_cpu() -> None:
    with pytest.raises(ConfigError) as e:
        load_config(None, ["memory.autocast=fp8"])
    assert "\n" not in str(e.value) and "off, bfloat16 or auto" in str(e.value)
    with pytest.raises(ValueError, match="unresolved"):
        autocast("auto", None)


def test_machine_facts_name_the_cpu_and_its_instruction_sets_on_cpu() -> None:
    facts = precision.machine_facts()
    assert facts["cpu"] and isinstance(facts["isa"], list) and facts["torch_threads"] >= 1
    assert set(facts["isa"]) <= set(precision.ISA_FLAGS)


def test_the_mixed_precision_sweep_is_the_real_study_plus_autocast_on_cpu() -> None:
    """sweeps/real-study-bf16.yaml must stay the real study's settings with memory.autocast=auto and a subset of its
    cells, or its verdicts would not test precision alone."""
    from pathlib import Path

    import yaml

    sweeps = Path(__file__).resolve().parent.parent / "sweeps"
    fp32 = yaml.safe_load((sweeps / "real-study.yaml").read_text())
    bf16 = yaml.safe_load((sweeps / "real-study-bf16.yaml").read_text())
    assert bf16["set"].pop("memory.autocast") == "auto"
    assert bf16["set"] == fp32["set"] and bf16["seeds"] == fp32["seeds"]
    assert bf16["cells"] and all(c in fp32["cells"] for c in bf16["cells"])
    assert bf16["keep"] != fp32["keep"] and bf16["output_dir"] != fp32["output_dir"]
