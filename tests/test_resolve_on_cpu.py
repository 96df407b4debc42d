"""Tests for ``corl_bench.train.runner.resolve``: registry lookups, cohort expansion and method options (writes nothing)."""

from __future__ import annotations

from pathlib import Path

import pytest

from corl_bench.config import AgentSpec, load_config
from corl_bench.train.runner import resolve
from tests.test_config_on_cpu import FIX_WORDS, _assert_one_line, _config_error, _resolve_error, _write_yaml


def test_resolve_unknown_method_lists_valid_methods() -> None:
    msg = _resolve_error("method.name=nope")
    _assert_one_line(msg)
    assert "method.name" in msg and "'nope'" in msg
    for name in ("corl", "gt-reward", "ttrl"):
        assert name in msg


def test_resolve_unknown_cohort_lists_cohorts_and_suggests_the_close_one() -> None:
    msg = _resolve_error("cohort.name=cross-famly")
    _assert_one_line(msg)
    assert "cohort.name" in msg
    assert "did you mean 'cross-family'" in msg
    for name in ("cross-family", "cross-family-rephrased", "same-family", "single", "three-agent"):
        assert name in msg


def test_resolve_unknown_benchmark_is_rejected() -> None:
    msg = _resolve_error("eval.benchmarks=[micro-test,gsm8k-nope]")
    _assert_one_line(msg)
    assert "eval.benchmarks" in msg and "micro-test" in msg and "micro-dev" in msg


def test_resolve_unknown_profile_is_rejected() -> None:
    msg = _resolve_error("model.profile=huge")
    _assert_one_line(msg)
    assert "model.profile" in msg and "micro" in msg


def test_resolve_accepts_method_aliases() -> None:
    assert resolve(load_config(None, ["method.name=co-rl"])).method_cls.name == "corl"
    assert resolve(load_config(None, ["method.name=GT", "cohort.name=single"])).method_cls.name == "gt-reward"


def test_resolve_rejects_corl_with_a_single_agent_cohort() -> None:
    msg = _resolve_error("method.name=corl", "cohort.name=single")
    _assert_one_line(msg)
    assert "'corl'" in msg
    assert "single" in msg
    assert "cohort with more agents, such as cross-family" in msg


@pytest.mark.parametrize("method", ["ttrl", "gt-reward"])
def test_resolve_accepts_single_agent_methods_on_the_single_cohort(method: str) -> None:
    plan = resolve(load_config(None, [f"method.name={method}", "cohort.name=single"]))
    assert [a.family for a in plan.config.cohort.agents] == ["qwen2-bpe"]


def test_resolve_rejects_ttrl_votes_below_samples_per_prompt() -> None:
    msg = _resolve_error("method.name=ttrl", "cohort.name=single", "method.options={votes_per_prompt: 4}",
                         "rollout.samples_per_prompt=8")
    _assert_one_line(msg)
    assert "votes_per_prompt" in msg and "samples_per_prompt" in msg
    assert any(word in msg for word in FIX_WORDS)


def test_resolve_accepts_ttrl_votes_at_or_above_samples_per_prompt() -> None:
    for votes, expected_n in ((8, 8), (16, 16), (0, 8)):
        plan = resolve(load_config(None, ["method.name=ttrl", "cohort.name=single",
                                          f"method.options={{votes_per_prompt: {votes}}}",
                                          "rollout.samples_per_prompt=8"]))
        assert plan.options.votes_per_prompt == votes
        assert plan.method_cls(plan.options, plan.config.cohort.agents).generation_n(8) == expected_n


def test_resolve_rejects_negative_ttrl_votes() -> None:
    msg = _resolve_error("method.name=ttrl", "cohort.name=single", "method.options={votes_per_prompt: -1}")
    _assert_one_line(msg)
    assert "votes_per_prompt" in msg


@pytest.mark.parametrize("method, cohort, valid", [
    ("ttrl", "single", ["votes_per_prompt"]),
    ("corl", "cross-family", ["supervision", "threshold"]),
    ("gt-reward", "single", ["(none)"]),
])
def test_resolve_rejects_unknown_method_option_naming_valid_options(method: str, cohort: str,
                                                                     valid: list[str]) -> None:
    msg = _resolve_error(f"method.name={method}", f"cohort.name={cohort}", "method.options={bogus: 1}")
    _assert_one_line(msg)
    assert "method.options.bogus" in msg and f"'{method}'" in msg
    for name in valid:
        assert name in msg


def test_resolve_rejects_a_bad_corl_option_value() -> None:
    msg = _resolve_error("method.options={supervision: star}")
    _assert_one_line(msg)
    assert "supervision" in msg and "ring" in msg


def test_resolve_parses_corl_options() -> None:
    plan = resolve(load_config(None, ["method.options={supervision: peer-majority, threshold: 0.5}",
                                      "cohort.name=three-agent"]))
    assert plan.options.supervision == "peer-majority"
    assert plan.options.threshold == 0.5


@pytest.mark.parametrize("override", ["method.options=5", "method.options=[a,b]"])
def test_non_mapping_method_options_is_a_config_error(override: str) -> None:
    msg = _resolve_error(override)
    _assert_one_line(msg)
    assert "method.options" in msg


def test_empty_method_options_means_no_options() -> None:
    assert resolve(load_config(None, ["method.options=null"])).config.method.options == {}


def test_resolve_expands_the_cross_family_cohort() -> None:
    cfg = load_config()
    plan = resolve(cfg)
    cohort = plan.config.cohort
    assert cohort.name == "cross-family"
    assert cohort.profile == "micro"
    assert [a.family for a in cohort.agents] == ["qwen2-bpe", "llama-bpe"]
    assert [a.name for a in cohort.agents] == ["a0-qwen2-bpe", "a1-llama-bpe"]
    assert [a.seed_offset for a in cohort.agents] == [0, 1]
    assert all(a.view == "original" for a in cohort.agents)
    # everything but the cohort is unchanged, and the input config is not mutated
    assert plan.config.replace(cohort=cfg.cohort) == cfg
    assert cfg.cohort.agents == ()


def test_resolve_expands_the_three_agent_cohort_in_ring_order() -> None:
    plan = resolve(load_config(None, ["cohort.name=three-agent"]))
    agents = plan.config.cohort.agents
    assert len(agents) == 3
    assert [a.name for a in agents] == ["a0-qwen2-bpe", "a1-llama-bpe", "a2-neox-bpe"]
    assert [a.family for a in agents] == ["qwen2-bpe", "llama-bpe", "neox-bpe"]
    assert [a.seed_offset for a in agents] == [0, 1, 2]
    method = plan.method_cls(plan.options, agents)
    # ring: agent n learns from agent n-1 (cyclic)
    assert method.teachers() == {"a0-qwen2-bpe": ["a2-neox-bpe"], "a1-llama-bpe": ["a0-qwen2-bpe"],
                                 "a2-neox-bpe": ["a1-llama-bpe"]}


def test_resolve_expands_the_rephrased_cohort_views() -> None:
    agents = resolve(load_config(None, ["cohort.name=cross-family-rephrased"])).config.cohort.agents
    assert [a.view for a in agents] == ["original", "rephrased"]


def test_resolve_uses_a_spelled_out_cohort_as_is() -> None:
    overrides = ["cohort.name=my-pair",
                 "cohort.agents=[{name: b, family: neox-bpe, view: rephrased, seed_offset: 5}, "
                 "{name: a, family: qwen2-bpe}]"]
    cfg = load_config(None, overrides)
    plan = resolve(cfg)
    assert plan.config.cohort == cfg.cohort
    assert plan.config.cohort.name == "my-pair"
    assert plan.config.cohort.agents == (AgentSpec("b", "neox-bpe", "rephrased", 5), AgentSpec("a", "qwen2-bpe"))
    assert plan.method_cls(plan.options, plan.config.cohort.agents).teachers() == {"b": ["a"], "a": ["b"]}


def test_spelled_out_agents_win_over_a_registered_cohort_name(tmp_path: Path) -> None:
    path = _write_yaml(tmp_path, "cohort:\n  name: three-agent\n  agents:\n"
                                 "    - {name: x, family: llama-bpe}\n    - {name: y, family: llama-bpe}\n")
    agents = resolve(load_config(path)).config.cohort.agents
    assert [(a.name, a.family) for a in agents] == [("x", "llama-bpe"), ("y", "llama-bpe")]


def test_resolve_rejects_an_unknown_family_in_a_spelled_out_cohort() -> None:
    msg = _resolve_error("cohort.name=mine",
                         "cohort.agents=[{name: x, family: qwen2-bpe}, {name: y, family: mistral-bpe}]")
    _assert_one_line(msg)
    assert "'y'" in msg and "mistral-bpe" in msg
    for family in ("qwen2-bpe", "llama-bpe", "neox-bpe"):
        assert family in msg


def test_spelled_out_cohort_with_duplicate_agent_names_is_rejected() -> None:
    msg = _config_error("cohort.agents=[{name: x, family: qwen2-bpe}, {name: x, family: llama-bpe}]")
    _assert_one_line(msg)
    assert "unique" in msg


def test_spelled_out_cohort_of_another_profile_is_rejected() -> None:
    msg = _resolve_error("cohort.profile=big", "cohort.agents=[{name: x, family: qwen2-bpe}, "
                                               "{name: y, family: llama-bpe}]")
    _assert_one_line(msg)
    assert "'big'" in msg and "'micro'" in msg


def test_resolve_checks_the_method_against_a_spelled_out_cohort() -> None:
    msg = _resolve_error("method.name=corl", "cohort.name=solo", "cohort.agents=[{name: x, family: qwen2-bpe}]")
    _assert_one_line(msg)
    assert "'corl'" in msg and "'solo'" in msg
