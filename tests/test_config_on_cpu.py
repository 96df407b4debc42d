"""Tests for ``corl_bench.config`` (loading, overrides, validation) and ``corl_bench.train.runner.resolve``.

Everything here is CPU-only and writes only under ``tmp_path``. ``resolve`` never trains or writes anything.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from corl_bench.config import (
    AgentSpec,
    CohortConfig,
    Config,
    ConfigError,
    EvalConfig,
    GRPOConfig,
    MethodConfig,
    ModelConfig,
    RolloutConfig,
    RunConfig,
    config_from_dict,
    dump_config,
    load_config,
    parse_override,
)
from corl_bench.train.runner import Plan, resolve

FIX_WORDS = ("set", "use", "valid")


def _config_error(*overrides: str, path: Path | None = None) -> str:
    """The message of the ConfigError that ``load_config(path, overrides)`` raises."""
    with pytest.raises(ConfigError) as info:
        load_config(path, list(overrides))
    return str(info.value)


def _resolve_error(*overrides: str) -> str:
    with pytest.raises(ConfigError) as info:
        resolve(load_config(None, list(overrides)))
    return str(info.value)


def _assert_one_line(msg: str) -> None:
    assert msg.strip(), "empty error message"
    assert "\n" not in msg and "\r" not in msg, f"error message is not one line: {msg!r}"


def _write_yaml(tmp_path: Path, text: str, name: str = "cfg.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# ----------------------------------------------------------------------------------------------- defaults
def test_defaults_build_and_validate() -> None:
    cfg = load_config()
    assert isinstance(cfg, Config)
    assert cfg == Config()
    assert cfg.model == ModelConfig()
    assert cfg.rollout == RolloutConfig()
    assert cfg.grpo == GRPOConfig()
    assert cfg.method == MethodConfig()
    assert cfg.cohort == CohortConfig()
    assert cfg.eval == EvalConfig()
    assert cfg.run == RunConfig()
    assert cfg.method.name == "corl"
    assert cfg.cohort.name == "cross-family"
    assert cfg.cohort.agents == ()  # expanded only by resolve()
    assert cfg.eval.benchmarks == ("micro-test",)


def test_default_config_resolves() -> None:
    plan = resolve(load_config())
    assert isinstance(plan, Plan)
    assert plan.config.method.name == "corl"
    assert len(plan.config.cohort.agents) == 2


def test_config_is_frozen() -> None:
    cfg = load_config()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.run.steps = 3  # type: ignore[misc]


# ----------------------------------------------------------------------------------------------- YAML files
def test_yaml_file_with_nested_sections_is_loaded(tmp_path: Path) -> None:
    path = _write_yaml(tmp_path, """
        model:
          dtype: bfloat16
          threads: 2
        rollout:
          prompts_per_step: 4
          samples_per_prompt: 6
          temperature: 0.7
        grpo:
          lr: 1.0e-4
          betas: [0.8, 0.95]
          scale_std: false
          loss_agg: dr_grpo
        method:
          name: ttrl
          options: {votes_per_prompt: 12}
        cohort:
          name: single
        eval:
          benchmarks: [micro-dev]
          greedy: false
          max_problems: 10
        run:
          seed: 7
          steps: 3
          run_id: my-run
    """.replace("\n        ", "\n"))
    cfg = load_config(path)
    assert cfg.model.dtype == "bfloat16" and cfg.model.threads == 2
    assert cfg.rollout.prompts_per_step == 4 and cfg.rollout.samples_per_prompt == 6
    assert cfg.rollout.temperature == pytest.approx(0.7)
    assert cfg.grpo.lr == pytest.approx(1e-4)
    assert cfg.grpo.betas == (0.8, 0.95)
    assert cfg.grpo.scale_std is False
    assert cfg.grpo.loss_agg == "dr_grpo"
    assert cfg.method.name == "ttrl" and dict(cfg.method.options) == {"votes_per_prompt": 12}
    assert cfg.cohort.name == "single"
    assert cfg.eval.benchmarks == ("micro-dev",) and cfg.eval.greedy is False and cfg.eval.max_problems == 10
    assert cfg.run.seed == 7 and cfg.run.steps == 3 and cfg.run.run_id == "my-run"
    # untouched fields keep their defaults
    assert cfg.rollout.top_p == 1.0 and cfg.grpo.clip_low == 0.2 and cfg.run.output_dir == "results/runs"


def test_empty_yaml_file_gives_defaults(tmp_path: Path) -> None:
    assert load_config(_write_yaml(tmp_path, "# nothing set\n")) == Config()


def test_string_path_is_accepted(tmp_path: Path) -> None:
    path = _write_yaml(tmp_path, "run:\n  steps: 5\n")
    assert load_config(str(path)).run.steps == 5


@pytest.mark.parametrize("text", ["- a\n- b\n", "just a string\n", "42\n"])
def test_yaml_file_that_is_not_a_mapping_is_rejected_in_one_line(tmp_path: Path, text: str) -> None:
    path = _write_yaml(tmp_path, text)
    msg = _config_error(path=path)
    _assert_one_line(msg)
    assert "mapping" in msg
    assert str(path) in msg


def test_invalid_yaml_is_rejected_in_one_line(tmp_path: Path) -> None:
    path = _write_yaml(tmp_path, "run: [1,\n  steps: 3\ngrpo: {lr: \n")
    msg = _config_error(path=path)
    _assert_one_line(msg)
    assert "not valid YAML" in msg
    assert str(path) in msg


def test_missing_config_file_is_rejected_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "nope" / "missing.yaml"
    msg = _config_error(path=path)
    _assert_one_line(msg)
    assert "does not exist" in msg
    assert str(path) in msg


def test_directory_as_config_file_is_rejected(tmp_path: Path) -> None:
    msg = _config_error(path=tmp_path)
    _assert_one_line(msg)


def test_yaml_section_that_is_not_a_mapping_is_rejected(tmp_path: Path) -> None:
    msg = _config_error(path=_write_yaml(tmp_path, "grpo: 5\n"))
    _assert_one_line(msg)
    assert "grpo" in msg and "mapping" in msg


def test_unknown_key_in_yaml_file_suggests_the_close_one(tmp_path: Path) -> None:
    msg = _config_error(path=_write_yaml(tmp_path, "rollout:\n  temprature: 0.5\n"))
    _assert_one_line(msg)
    assert "rollout.temprature" in msg
    assert "did you mean rollout.temperature" in msg


def test_unknown_top_level_section_lists_sections() -> None:
    with pytest.raises(ConfigError) as info:
        config_from_dict({"trainer": {"lr": 1}})
    msg = str(info.value)
    _assert_one_line(msg)
    assert "trainer" in msg
    for section in ("model", "rollout", "grpo", "method", "cohort", "eval", "run"):
        assert section in msg


def test_config_from_dict_rejects_a_non_mapping() -> None:
    with pytest.raises(ConfigError) as info:
        config_from_dict(["grpo"])  # type: ignore[arg-type]
    _assert_one_line(str(info.value))


# ----------------------------------------------------------------------------------------------- overrides
def test_parse_override_parses_values_as_yaml() -> None:
    assert parse_override("run.steps=5") == ("run.steps", 5)
    assert parse_override("grpo.lr=0.001") == ("grpo.lr", 0.001)
    assert parse_override("eval.greedy=false") == ("eval.greedy", False)
    assert parse_override("eval.benchmarks=[micro-test,micro-dev]") == ("eval.benchmarks", ["micro-test", "micro-dev"])
    assert parse_override("run.run_id=") == ("run.run_id", "")
    assert parse_override(" run.seed =3") == ("run.seed", 3)


def test_override_without_equals_sign_is_rejected() -> None:
    msg = _config_error("grpo.lr")
    _assert_one_line(msg)
    assert "section.key=value" in msg


def test_overrides_of_numbers_lists_and_booleans() -> None:
    cfg = load_config(None, ["run.steps=5", "grpo.lr=3e-5", "rollout.temperature=0.5", "grpo.betas=[0.5,0.6]",
                             "eval.benchmarks=[micro-test,micro-dev]", "eval.greedy=false",
                             "run.save_checkpoints=false", "grpo.scale_std=false"])
    assert cfg.run.steps == 5 and isinstance(cfg.run.steps, int)
    assert cfg.grpo.lr == pytest.approx(3e-5) and isinstance(cfg.grpo.lr, float)  # "3e-5" is a YAML string
    assert cfg.rollout.temperature == pytest.approx(0.5)
    assert cfg.grpo.betas == (0.5, 0.6)
    assert cfg.eval.benchmarks == ("micro-test", "micro-dev")
    assert cfg.eval.greedy is False
    assert cfg.run.save_checkpoints is False
    assert cfg.grpo.scale_std is False


def test_comma_string_override_becomes_a_list() -> None:
    assert load_config(None, ["eval.benchmarks=micro-test,micro-dev"]).eval.benchmarks == ("micro-test", "micro-dev")


def test_integer_override_for_a_float_field_becomes_a_float() -> None:
    cfg = load_config(None, ["rollout.temperature=2"])
    assert cfg.rollout.temperature == 2.0 and isinstance(cfg.rollout.temperature, float)


def test_overrides_take_precedence_over_the_yaml_file(tmp_path: Path) -> None:
    path = _write_yaml(tmp_path, "run:\n  steps: 10\n  seed: 4\ngrpo:\n  lr: 1.0e-4\n"
                                 "eval:\n  benchmarks: [micro-test]\n  greedy: true\n")
    cfg = load_config(path, ["run.steps=2", "grpo.lr=2e-5", "eval.benchmarks=[micro-test,micro-dev]",
                             "eval.greedy=false", "method.name=ttrl"])
    assert cfg.run.steps == 2
    assert cfg.run.seed == 4  # not overridden: from the file
    assert cfg.grpo.lr == pytest.approx(2e-5)
    assert cfg.eval.benchmarks == ("micro-test", "micro-dev")
    assert cfg.eval.greedy is False
    assert cfg.method.name == "ttrl"


def test_later_override_wins() -> None:
    assert load_config(None, ["run.steps=1", "run.steps=9"]).run.steps == 9


def test_mapping_override_sets_method_options() -> None:
    cfg = load_config(None, ["method.name=ttrl", "method.options={votes_per_prompt: 16}"])
    assert dict(cfg.method.options) == {"votes_per_prompt": 16}


def test_unknown_override_key_suggests_the_close_field() -> None:
    msg = _config_error("grpo.lrr=1")
    _assert_one_line(msg)
    assert "grpo.lrr" in msg
    assert "did you mean grpo.lr?" in msg


def test_unknown_override_key_without_close_match_lists_valid_fields() -> None:
    msg = _config_error("run.zzzzzz=1")
    _assert_one_line(msg)
    assert "run.zzzzzz" in msg
    assert "valid" in msg and "steps" in msg and "seed" in msg


def test_override_into_a_non_section_is_rejected(tmp_path: Path) -> None:
    path = _write_yaml(tmp_path, "grpo: 3\n")
    msg = _config_error("grpo.lr=1", path=path)
    _assert_one_line(msg)
    assert "grpo" in msg


@pytest.mark.parametrize("override, field", [
    ("run.steps=abc", "run.steps"),
    ("run.steps=1.5", "run.steps"),
    ("run.seed=true", "run.seed"),
    ("grpo.lr=fast", "grpo.lr"),
    ("eval.greedy=maybe", "eval.greedy"),
    ("eval.greedy=1", "eval.greedy"),
    ("grpo.betas=0.9", "grpo.betas"),
    ("grpo.betas=[0.9,0.99,0.999]", "grpo.betas"),
    ("eval.benchmarks=5", "eval.benchmarks"),
    ("model.dtype=[a]", "model.dtype"),
])
def test_wrong_type_gives_a_one_line_error_naming_the_field(override: str, field: str) -> None:
    msg = _config_error(override)
    _assert_one_line(msg)
    assert field in msg


@pytest.mark.parametrize("override, field", [
    ("grpo.lr=-1", "grpo.lr"),
    ("grpo.lr=0", "grpo.lr"),
    ("rollout.samples_per_prompt=1", "rollout.samples_per_prompt"),
    ("rollout.top_p=2", "rollout.top_p"),
    ("rollout.top_p=0", "rollout.top_p"),
    ("rollout.temperature=0", "rollout.temperature"),
    ("rollout.prompts_per_step=0", "rollout.prompts_per_step"),
    ("rollout.max_new_tokens=-4", "rollout.max_new_tokens"),
    ("rollout.backend= ", "rollout.backend"),
    ("grpo.loss_agg=foo", "grpo.loss_agg"),
    ("grpo.betas=[0.9,1.0]", "grpo.betas"),
    ("grpo.clip_low=1.0", "grpo.clip_low"),
    ("grpo.clip_high=-0.1", "grpo.clip_high"),
    ("grpo.kl_coef=-1", "grpo.kl_coef"),
    ("grpo.max_grad_norm=0", "grpo.max_grad_norm"),
    ("grpo.adv_eps=0", "grpo.adv_eps"),
    ("model.dtype=float16", "model.dtype"),
    ("model.threads=-1", "model.threads"),
    ("eval.benchmarks=[]", "eval.benchmarks"),
    ("eval.samples=-1", "eval.samples"),
    ("eval.temperature=-1", "eval.temperature"),
    ("eval.max_new_tokens=0", "eval.max_new_tokens"),
    ("run.steps=-1", "run.steps"),
])
def test_bad_value_gives_a_one_line_error_naming_the_field_and_a_fix(override: str, field: str) -> None:
    msg = _config_error(override)
    _assert_one_line(msg)
    assert field in msg
    assert any(word in msg for word in FIX_WORDS), f"no fix hint in {msg!r}"


@pytest.mark.parametrize("override, field", [
    ("eval.max_problems=-1", "eval.max_problems"),
    ("grpo.weight_decay=-1", "grpo.weight_decay"),
    ("run.log_samples_every=-1", "run.log_samples_every"),
    ("run.samples_per_log=-1", "run.samples_per_log"),
])
def test_bad_value_without_fix_hint_still_gives_a_one_line_error_naming_the_field(override: str, field: str) -> None:
    # These messages state the constraint but (unlike the ones above) no "set ..." hint; see the report.
    msg = _config_error(override)
    _assert_one_line(msg)
    assert field in msg and ">= 0" in msg


def test_bad_loss_agg_lists_the_valid_modes() -> None:
    msg = _config_error("grpo.loss_agg=foo")
    assert "'foo'" in msg
    for mode in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"):
        assert mode in msg


@pytest.mark.parametrize("alias", ["bnpo", "grpo", "dr_grpo", "token-mean", "seq-mean-token-sum-norm"])
def test_loss_agg_accepts_modes_and_aliases(alias: str) -> None:
    assert load_config(None, [f"grpo.loss_agg={alias}"]).grpo.loss_agg == alias


@pytest.mark.parametrize("run_id", ["a/b", "..", "."])
def test_run_id_must_be_a_plain_directory_name(run_id: str) -> None:
    msg = _config_error(f"run.run_id={run_id}")
    _assert_one_line(msg)
    assert "run.run_id" in msg


def test_section_constructors_validate_directly() -> None:
    with pytest.raises(ConfigError, match=r"grpo\.lr"):
        GRPOConfig(lr=-1.0)
    with pytest.raises(ConfigError, match=r"rollout\.samples_per_prompt"):
        RolloutConfig(samples_per_prompt=1)
    with pytest.raises(ConfigError, match="view"):
        AgentSpec(name="x", family="qwen2-bpe", view="sideways")
    with pytest.raises(ConfigError, match="unique"):
        CohortConfig(name="dup", agents=(AgentSpec("x", "qwen2-bpe"), AgentSpec("x", "llama-bpe")))


def test_cohort_agent_missing_family_is_a_one_line_error() -> None:
    msg = _config_error("cohort.agents=[{name: x}]")
    _assert_one_line(msg)
    assert "cohort.agents[0]" in msg and "family" in msg


def test_cohort_agent_unknown_field_is_rejected() -> None:
    msg = _config_error("cohort.agents=[{name: x, family: qwen2-bpe, colour: red}]")
    _assert_one_line(msg)
    assert "cohort.agents[0].colour" in msg


def test_cohort_paper_row_is_validated_in_one_line_naming_the_valid_rows() -> None:
    msg = _config_error("cohort.paper_row=cross-family")
    _assert_one_line(msg)
    assert msg == ("cohort 'cross-family': paper_row must be one of different-family, same-family, different-family+, "
                   "three-agent (got 'cross-family'); or leave it out")


@pytest.mark.parametrize("agents, row, words", [
    ("[{name: a, family: qwen2-bpe}, {name: b, family: llama-bpe, seed_offset: 1}]", "three-agent",
     "has 3 agents (got 2)"),
    ("[{name: a, family: qwen2-bpe}, {name: b, family: llama-bpe, seed_offset: 1}]", "same-family",
     "has one family twice (got several)"),
    ("[{name: a, family: qwen2-bpe}, {name: b, family: qwen2-bpe, seed_offset: 1}]", "different-family",
     "has agents of different families (got one)"),
    ("[{name: a, family: qwen2-bpe}, {name: b, family: llama-bpe, seed_offset: 1}]", "different-family+",
     "has one agent on the rephrased view"),
    ("[{name: a, family: qwen2-bpe}, {name: b, family: llama-bpe, view: rephrased}]", "different-family",
     "has no rephrased view"),
])
def test_a_cohort_whose_agents_are_not_its_paper_rows_design_is_refused(agents: str, row: str, words: str) -> None:
    msg = _resolve_error("cohort.name=mine", f"cohort.agents={agents}", f"cohort.paper_row={row}")
    _assert_one_line(msg)
    assert msg == f"cohort 'mine': the paper's {row} row {words}; fix the agents or leave cohort.paper_row out"


def test_registered_cohorts_name_their_paper_rows() -> None:
    from corl_bench.registries import COHORTS

    rows = {name: COHORTS.get(name).paper_row for name in COHORTS.names()}
    assert {n: r for n, r in rows.items() if r} == {
        "cross-family": "different-family", "same-family": "same-family", "three-agent": "three-agent",
        "cross-family-rephrased": "different-family+", "smol-cross-family": "different-family",
        "smol-same-family": "same-family", "smol-cross-family-rephrased": "different-family+",
        "visual-cross-family": "different-family"}
    from corl_bench.train.runner import _check_paper_row

    for name in rows:  # every registered cohort has the design of the row it names (resolve checks it)
        _check_paper_row(COHORTS.get(name))
    assert resolve(load_config(None, ["cohort.name=three-agent"])).config.cohort.paper_row == "three-agent"


# ----------------------------------------------------------------------------------------------- dump round trip
def _round_trip(cfg: Config, tmp_path: Path) -> Config:
    path = tmp_path / "dumped.yaml"
    path.write_text(dump_config(cfg), encoding="utf-8")
    return load_config(path)


def test_dump_config_round_trips_the_defaults(tmp_path: Path) -> None:
    cfg = load_config()
    assert _round_trip(cfg, tmp_path) == cfg


def test_dump_config_round_trips_a_customised_config(tmp_path: Path) -> None:
    cfg = load_config(None, ["method.name=ttrl", "method.options={votes_per_prompt: 12}", "cohort.name=single",
                             "grpo.lr=2e-5", "grpo.betas=[0.8,0.9]", "eval.benchmarks=[micro-test,micro-dev]",
                             "eval.greedy=false", "model.cache_dir=/tmp/x", "run.run_id=abc", "run.steps=0"])
    back = _round_trip(cfg, tmp_path)
    assert back == cfg
    assert back.grpo.betas == (0.8, 0.9) and back.eval.benchmarks == ("micro-test", "micro-dev")


def test_dump_config_round_trips_a_resolved_config_with_agents(tmp_path: Path) -> None:
    cfg = resolve(load_config(None, ["cohort.name=cross-family-rephrased"])).config
    assert len(cfg.cohort.agents) == 2
    back = _round_trip(cfg, tmp_path)
    assert back == cfg
    assert all(isinstance(a, AgentSpec) for a in back.cohort.agents)
    assert back.cohort.agents[1].view == "rephrased"
    # and the reloaded, already-expanded config resolves to itself
    assert resolve(back).config == cfg


def test_dump_config_is_plain_yaml() -> None:
    data = yaml.safe_load(dump_config(load_config()))
    assert list(data) == ["model", "rollout", "grpo", "memory", "method", "cohort", "eval", "data", "run", "monitor"]
    assert data["grpo"]["betas"] == [0.9, 0.99]
    assert config_from_dict(data) == load_config()


# ---------------------------------------------------------------- memory: section (moved from grpo:)
def test_memory_knobs_have_their_own_section_and_grpo_keeps_the_update():
    from corl_bench.config import MOVED_TO_MEMORY, MemoryConfig

    assert set(MOVED_TO_MEMORY) == {f.name for f in dataclasses.fields(MemoryConfig)}
    assert not set(MOVED_TO_MEMORY) & {f.name for f in dataclasses.fields(GRPOConfig)}
    cfg = load_config(None, ["memory.micro_batch=4", "memory.logit_chunk=64"])
    assert (cfg.memory.micro_batch, cfg.memory.logit_chunk) == (4, 64)
    with pytest.raises(ConfigError, match=r"memory\.micro_batch must be >= 0 .*set memory\.micro_batch=0"):
        load_config(None, ["memory.micro_batch=-1"])


def test_old_grpo_memory_keys_load_as_memory_keys_with_a_warning(tmp_path, caplog):
    import logging

    from corl_bench import config as config_mod

    config_mod._warned_moved.clear()
    path = tmp_path / "old.yaml"
    path.write_text("grpo: {lr: 3.0e-6, micro_batch: 8, logit_chunk: 1024, gradient_checkpointing: true}\n")
    with caplog.at_level(logging.WARNING, logger="corl_bench.config"):
        cfg = load_config(path, ["grpo.lora_rank=4"])  # --set under the old name too
    assert cfg.grpo.lr == 3.0e-6
    assert (cfg.memory.micro_batch, cfg.memory.logit_chunk, cfg.memory.gradient_checkpointing,
            cfg.memory.lora_rank) == (8, 1024, True, 4)
    assert caplog.text.count("moved to the memory section") == 1  # one line per load
    assert ("grpo.micro_batch, grpo.logit_chunk, grpo.gradient_checkpointing, grpo.lora_rank moved to the memory "
            "section") in caplog.text
    assert cfg == load_config(None, ["grpo.lr=3e-6", "memory.micro_batch=8", "memory.logit_chunk=1024",
                                     "memory.gradient_checkpointing=true", "memory.lora_rank=4"])
    assert load_config(None, ["grpo.micro_batch=2", "memory.micro_batch=2"]).memory.micro_batch == 2
    with pytest.raises(ConfigError, match=r"grpo\.micro_batch \(2\) and memory\.micro_batch \(4\) disagree"):
        load_config(None, ["grpo.micro_batch=2", "memory.micro_batch=4"])
    with pytest.raises(ConfigError, match=r"memory\.shared_prefix cannot be combined"):
        load_config(None, ["grpo.shared_prefix=true", "grpo.logit_chunk=8"])


def test_a_run_directory_written_with_grpo_memory_keys_still_resumes(tmp_path):
    """An older run's config.yaml holds the memory knobs under grpo: it reads as the same config today."""
    from corl_bench.train.resume import RESUME_IGNORES, config_diff, stored_config

    cfg = load_config(None, ["memory.micro_batch=4", "memory.shared_prefix=true"])
    old = cfg.to_dict()
    old["grpo"].update(old.pop("memory"))  # the layout before the memory: section existed
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(old, sort_keys=False))
    assert config_diff(stored_config(tmp_path), cfg.to_dict(), ignore=RESUME_IGNORES) == []
