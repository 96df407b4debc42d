"""Checkpoint selection without test labels (issue 14, item 6): the rules on synthetic phase scores and
predictions, validation, the table reading the selected phase and its footer stating the rule, and one small end to
end run with tiny families (``slow``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corl_bench.config import ConfigError, load_config
from corl_bench.train.select import (best_phase, candidate_phases, majority_answers, peer_agreement, phase_of_step,
                                     select_run)
from tests.table_fixtures import L, L_BASE, Q, Q_BASE, ab, build_world, make_world_run, write_counts


# ------------------------------------------------------------------------------------------ pure rules
def test_candidates_are_the_step_phases_in_order_then_final_never_base():
    assert candidate_phases(["final", "step-000020", "base", "step-000005", "notes"]) == \
        ["step-000005", "step-000020", "final"]
    assert phase_of_step("step-000020", 50) == 20 and phase_of_step("final", 37) == 37
    assert phase_of_step("base", 50) == 0 and phase_of_step("odd", 50) is None


def test_the_best_phase_wins_ties_go_to_the_later_phase_and_missing_values_are_skipped():
    order = ["step-000010", "step-000020", "final"]
    assert best_phase({"step-000010": 0.4, "step-000020": 0.6, "final": 0.5}, order) == "step-000020"
    assert best_phase({"step-000010": 0.6, "step-000020": 0.6, "final": 0.6}, order) == "final"
    assert best_phase({"step-000010": 0.7, "step-000020": None}, order) == "step-000010"
    assert best_phase({}, order) is None


def _rows(answers_by_problem: dict[str, list], greedy: dict[str, str] | None = None) -> list[dict]:
    rows = []
    for pid, answers in answers_by_problem.items():
        rows += [{"problem_id": pid, "decoding": "sampled", "sample_index": j, "extracted": a, "gold": "IGNORED"}
                 for j, a in enumerate(answers)]
    for pid, a in (greedy or {}).items():
        rows.append({"problem_id": pid, "decoding": "greedy", "sample_index": 0, "extracted": a})
    return rows


def test_majority_answers_vote_over_samples_and_fall_back_to_greedy():
    votes = majority_answers(_rows({"p1": ["3", "4", "3"], "p2": [None, None], "p3": ["7", "8"]},
                                   greedy={"p1": "9", "p4": "5"}))
    assert votes == {"p1": "3", "p2": None, "p3": "7", "p4": "5"}  # ties: the first seen; no samples: greedy


def test_peer_agreement_is_the_share_of_problems_with_the_same_answer_averaged_over_peers():
    a = {"p1": "3", "p2": "4", "p3": None, "p4": "1"}
    b = {"p1": "3", "p2": "5", "p3": None, "p4": "1"}
    c = {"p1": "0", "p2": "4", "p3": "2", "p4": "1"}
    agree = peer_agreement({"a": a, "b": b, "c": c})
    assert agree["a"] == pytest.approx((2 / 4 + 2 / 4) / 2)  # no answer never agrees
    assert agree["b"] == pytest.approx((2 / 4 + 1 / 4) / 2)
    assert peer_agreement({"solo": a}) == {"solo": None}


# ------------------------------------------------------------------------------------------ a run's record
def _selection_run(root: Path) -> Path:
    """Two agents, phases step-000010 / step-000020 / final; micro-dev (selection/) and micro-test (eval/) rows.

    dev pass@1 (of 10 samples): Q 4, 8, 6 -> step-000020; L 2, 2, 2 -> final (tie goes late).
    test pass@1: Q 3, 5, 9 -> final; L 7, 1, 1 -> step-000010."""
    run = root / "run"
    dev = {"step-000010": (4, 2), "step-000020": (8, 2), "final": (6, 2)}
    test = {"step-000010": (3, 7), "step-000020": (5, 1), "final": (9, 1)}
    for phase in dev:
        for i, agent in enumerate((Q, L)):
            write_counts(run / "selection" / phase / agent / "micro-dev.jsonl", "micro-dev", dev[phase][i])
            write_counts(run / "eval" / phase / agent / "micro-test.jsonl", "micro-test", test[phase][i])
    return run


def test_dev_selects_on_the_dev_split_and_records_every_candidates_value(tmp_path):
    run = _selection_run(tmp_path)
    record = select_run(run, "dev", "micro-dev", agents=[Q, L], steps=30, samples=2)
    assert record["rule"] == "dev" and record["benchmark"] == "micro-dev" and "dev split" in record["criterion"]
    assert record["agents"][Q]["phase"] == "step-000020" and record["agents"][Q]["step"] == 20
    assert record["agents"][Q]["values"] == {"step-000010": 0.4, "step-000020": 0.8, "final": 0.6}
    assert record["agents"][L] == {"phase": "final", "step": 30,
                                   "values": {"step-000010": 0.2, "step-000020": 0.2, "final": 0.2}}


def test_test_oracle_selects_on_the_first_evaluated_benchmark(tmp_path):
    record = select_run(_selection_run(tmp_path), "test-oracle", "micro-test", agents=[Q, L], steps=30, samples=2)
    assert record["agents"][Q]["phase"] == "final" and record["agents"][L]["phase"] == "step-000010"


def test_label_free_reads_no_gold_and_skips_phases_after_a_collapse_alarm(tmp_path):
    run = tmp_path / "run"
    agreeing = {"step-000010": (["1", "2", "3", "4"], ["1", "2", "0", "0"]),  # agree on 2 of 4
                "step-000020": (["1", "2", "3", "4"], ["1", "2", "3", "0"]),  # 3 of 4
                "final": (["5", "5", "5", "5"], ["5", "5", "5", "5"])}  # 4 of 4: both collapsed onto "5"
    for phase, (qa, la) in agreeing.items():
        for agent, answers in ((Q, qa), (L, la)):
            path = run / "selection" / phase / agent / "micro-dev.jsonl"
            path.parent.mkdir(parents=True)
            rows = _rows({f"p{i}": [a, a] for i, a in enumerate(answers)})
            path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    plain = select_run(run, "label-free", "micro-dev", agents=[Q, L], steps=30, samples=2)
    assert plain["agents"][Q]["phase"] == "final" and plain["agents"][Q]["values"]["final"] == 1.0
    alarmed = select_run(run, "label-free", "micro-dev", agents=[Q, L], steps=30, samples=2,
                         alarm_steps={Q: 24})
    assert alarmed["agents"][Q]["phase"] == "step-000020"
    assert alarmed["agents"][Q]["excluded_after_alarm"] == ["final"]
    assert alarmed["agents"][L]["phase"] == "final"  # L's own alarm never fired
    early = select_run(run, "label-free", "micro-dev", agents=[Q, L], steps=30, samples=2, alarm_steps={Q: 3})
    assert early["agents"][Q]["phase"] == "step-000010"  # nothing before the alarm: the earliest phase


def test_final_selects_nothing(tmp_path):
    assert select_run(tmp_path, "final", "micro-dev", agents=[Q], steps=3, samples=2) is None


# ------------------------------------------------------------------------------------------ validation
@pytest.mark.parametrize("overrides,message", [
    (["eval.select=dev"], r"eval.select=dev needs intermediate evaluations to choose from \(eval.every=0 with "
                          r"run.steps=50 gives none\); set eval.every=10 \(or eval.select=final\)"),
    (["eval.select=test-oracle", "eval.every=50"], r"eval.select=test-oracle needs intermediate evaluations"),
    (["eval.select=label-free", "eval.every=10", "method.name=ttrl", "cohort.name=single"],
     r"eval.select=label-free compares an agent with its peers and the cohort has 1 agent"),
    (["eval.select=dev", "eval.every=10", "eval.benchmarks=[micro-test,micro-dev]"],
     r"the dev split micro-dev is also in eval.benchmarks.*remove micro-dev from eval.benchmarks"),
])
def test_validation_refuses_a_selection_that_cannot_work_in_one_line(tmp_path, overrides, message):
    from corl_bench.train.runner import resolve

    with pytest.raises(ConfigError, match=message) as err:
        resolve(load_config(None, [*overrides, f"run.output_dir={tmp_path}"]))
    assert "\n" not in str(err.value)


def test_an_unknown_rule_and_a_profile_without_a_dev_split_are_refused(tmp_path):
    from corl_bench.train.select import check_selection

    with pytest.raises(ConfigError, match="eval.select must be one of final, dev, label-free, test-oracle"):
        load_config(None, ["eval.select=best"])

    from corl_bench.profile import Profile

    class NoDev(Profile):  # the base class's default: no dev split
        name = "plugin"

    cfg = load_config(None, ["eval.select=dev", "eval.every=10"])
    with pytest.raises(ConfigError, match="profile 'plugin' names none; use eval.select=final"):
        check_selection(cfg, NoDev, 2)
    assert check_selection(load_config(None, ["eval.select=test-oracle", "eval.every=10"]), NoDev, 1) == "micro-test"
    assert check_selection(load_config(None, []), NoDev, 1) is None


# ------------------------------------------------------------------------------------------ table and footer
def _select(run_dir: Path, rule: str, bench: str, phases: dict[str, str]) -> None:
    meta = json.loads((run_dir / "run.json").read_text())
    meta["selection"] = {"rule": rule, "benchmark": bench, "criterion": "c",
                         "agents": {a: {"phase": p, "step": 20, "values": {}} for a, p in phases.items()}}
    (run_dir / "run.json").write_text(json.dumps(meta))


def _world_with_a_step_phase(root: Path, rule: str | None) -> Path:
    """Co-RL cross-family s0 whose step-000020 phase is better for qwen2 (100/100) than its final (80/60)."""
    run = make_world_run(root, "corl-cross-family-s0", "corl", "cross-family", 0, {Q: "qwen2-bpe", L: "llama-bpe"},
                         {Q: ab(8, 6), L: ab(4, 4)}, {Q: Q_BASE, L: L_BASE})
    for bench in ("alpha", "beta"):
        write_counts(run / "eval" / "step-000020" / Q / f"{bench}.jsonl", bench, 10, 0)
    if rule is not None:
        _select(run, rule, "micro-dev" if rule != "test-oracle" else "alpha", {Q: "step-000020", L: "final"})
    return root


def _qwen_corl(table) -> tuple:
    block = next(b for b in table.blocks if b.family == "qwen2-bpe")
    return next(r for r in block.rows if r.method == "corl").cells


@pytest.mark.parametrize("rule,words", [
    (None, "Checkpoint: final checkpoint after 50 steps, no selection on test data."),
    ("dev", "Checkpoint: selected on micro-dev (labelled, disjoint from test), among the eval.every phases and "
            "final, in corl-cross-family-s0."),
    ("label-free", "Checkpoint: selected label-free by peer agreement on micro-dev"),
    ("test-oracle", "Checkpoint: **selected on the test set (test-oracle): optimistic** (best alpha pass@1)"),
])
def test_the_table_reports_the_selected_phase_and_the_footer_states_the_rule(tmp_path, rule, words):
    from corl_bench.report.layout import build

    table = build(_world_with_a_step_phase(tmp_path, rule))
    cells = _qwen_corl(table)
    expected = (0.8, 0.6) if rule is None else (1.0, 1.0)
    assert (cells[0].mean, cells[1].mean) == pytest.approx(expected)
    assert any(line.startswith(words) for line in table.footer), table.footer
    oracle_warned = any("test-oracle" in w and "optimistic" in w for w in table.warnings)
    assert oracle_warned == (rule == "test-oracle")


def test_final_can_still_be_asked_for_and_a_missing_selected_phase_falls_back_with_a_warning(tmp_path):
    from corl_bench.report.collect import collect_results
    from corl_bench.report.layout import build

    root = _world_with_a_step_phase(tmp_path, "dev")
    plain = collect_results(root, selected=False)
    assert {r.phase for r in plain.results} == {"final"} and plain.runs[0].selection is None
    chosen = collect_results(root)
    assert {(r.agent, r.phase) for r in chosen.results} == {(Q, "step-000020"), (L, "final")}
    _select(root / "runs" / "corl-cross-family-s0", "dev", "micro-dev", {Q: "step-000099"})
    table = build(root)
    assert _qwen_corl(table)[0].mean == pytest.approx(0.8)
    assert any("selected phase step-000099 has no predictions; showing final" in w for w in table.warnings)


def test_a_table_of_mixed_rules_names_the_runs_of_each(tmp_path):
    from corl_bench.report.layout import build

    build_world(tmp_path, only=["ttrl-single-s0", "ttrl-single-s1"])
    _select(tmp_path / "runs" / "ttrl-single-s1", "test-oracle", "alpha", {})
    footer = build(tmp_path).footer
    assert "Checkpoint: final checkpoint after 50 steps, no selection on test data in ttrl-single-s0." in footer
    assert any(line.startswith("Checkpoint: **selected on the test set (test-oracle)") and "ttrl-single-s1" in line
               for line in footer)


# ------------------------------------------------------------------------------------------ end to end
@pytest.mark.slow
def test_a_tiny_run_selects_on_the_dev_split_and_the_table_shows_that_phase(tmp_path):
    """Two tiny agents, 2 steps, eval.every=1, eval.select=dev: micro-dev is evaluated at step 1 and final (never
    at base, never in eval/), run.json records the choice, the table reads it and its footer says so."""
    from corl_bench.registries import FAMILIES
    from corl_bench.report.layout import build
    from corl_bench.results import RunDir
    from corl_bench.train.runner import run
    from tests.conftest import tiny_family

    for name in ("qwen2-bpe", "neox-bpe"):
        fam = tiny_family(name, warmstart_steps=2, warmstart_batch=8)
        if fam.name not in FAMILIES:
            FAMILIES.register(fam.name, fam)
    cfg = load_config(None, [
        "method.name=corl", "cohort.name=tiny-cross",
        "cohort.agents=[{name: a0, family: tiny-qwen2-bpe}, {name: a1, family: tiny-neox-bpe, seed_offset: 1}]",
        "run.steps=2", f"run.output_dir={tmp_path / 'results' / 'runs'}", f"model.cache_dir={tmp_path / 'cache'}",
        "rollout.prompts_per_step=2", "rollout.samples_per_prompt=2", "rollout.max_new_tokens=8",
        "eval.max_problems=4", "eval.samples=2", "eval.max_new_tokens=8", "eval.every=1", "eval.select=dev",
        "run.save_checkpoints=false"])
    rd = RunDir(run(cfg))
    info = rd.info()
    sel = info["selection"]
    assert sel["rule"] == "dev" and sel["benchmark"] == "micro-dev"
    assert set(sel["agents"]) == {"a0", "a1"}
    for choice in sel["agents"].values():
        assert set(choice["values"]) == {"step-000001", "final"} and choice["phase"] in choice["values"]
    assert sorted(p.name for p in rd.selection_root.iterdir()) == ["final", "step-000001"]
    assert all("micro-dev" not in rd.benchmarks(p, "a0") for p in rd.phases())  # never a table column
    rows = [json.loads(x) for x in rd.selection_path("final", "a0", "micro-dev").read_text().splitlines()]
    assert len(rows) == 4 * 3 and {r["benchmark"] for r in rows} == {"micro-dev"}
    table = build(rd.path.parent.parent)
    assert any(line.startswith("Checkpoint: selected on micro-dev (labelled, disjoint from test)")
               for line in table.footer)
    free = select_run(rd.path, "label-free", "micro-dev", agents=["a0", "a1"], steps=2, samples=2)
    assert set(free["agents"]["a0"]["values"]) == {"step-000001", "final"}
