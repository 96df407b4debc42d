"""Error-overlap probe (kappa, c, w, u) and the test-time ensemble control: hand-computed statistics on made-up
vectors, edge cases, hand-built prediction rows, both commands through the CLI, and one real tiny-model probe."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from corl_bench.cli import app
from corl_bench.config import ConfigError
from corl_bench.report.controls import ensemble_majority
from corl_bench.eval.metrics import maj_at_k
from corl_bench.report.overlap import cohen_kappa, mean_overlap, outcomes_from_rows, overlap_of, pair_overlap, probe_pairs
from corl_bench.grading.verifier import extract_normalized

T, F = True, False


# ---------------------------------------------------------------------------------------------- pure statistics
def test_hand_computed_kappa_c_w_u():
    # problems:   0     1     2      3     4     5
    a_ok = [T, T, F, F, T, F]
    b_ok = [T, F, F, T, T, F]
    a_ans = ["4", "9", "0.5", "2", "3", "7"]
    b_ans = ["4", "1", "1/2", "8", "3", "8"]  # both wrong on 2 (0.5 == 1/2: equivalent) and on 5 (7 vs 8: not)
    o = pair_overlap(a_ok, b_ok, a_ans, b_ans, a="x", b="y")
    # p_A = p_B = 1/2, p_o = 4/6, p_e = 1/2 -> kappa = (2/3 - 1/2) / (1/2) = 1/3
    assert o.kappa == pytest.approx(1 / 3) and o.kappa_note is None
    assert (o.a, o.b, o.n) == ("x", "y", 6)
    assert o.c == pytest.approx(2 / 6)  # problems 1 and 3
    assert o.w == pytest.approx(1 / 6)  # only problem 2
    assert o.u == pytest.approx(4 / 6)  # at least one right: 0, 1, 3, 4
    assert o.both_right == pytest.approx(2 / 6) and o.both_wrong == pytest.approx(2 / 6)
    assert o.acc_a == pytest.approx(0.5) and o.acc_b == pytest.approx(0.5)


def test_wrong_agreement_needs_equivalent_answers_not_just_any_wrong_answer():
    ok = [F, F, F, F]
    different = pair_overlap(ok, ok, ["3", "5", None, "x"], ["4", "6", None, "y"])
    assert different.w == 0.0  # all wrong, never the same answer; None never agrees with None
    same = pair_overlap(ok, ok, ["0.5", "2", "10", None], ["1/2", "2.0", "10", "3"])
    assert same.w == pytest.approx(3 / 4)
    exact_only = pair_overlap(ok, ok, ["0.5", "2", "10", None], ["1/2", "2.0", "10", "3"],
                              equivalent=lambda x, y: x == y)
    assert exact_only.w == pytest.approx(1 / 4)
    assert pair_overlap(ok, ok).w is None  # no answers given: not measured


def test_kappa_with_unequal_accuracies():
    # p_A = 3/4, p_B = 1/4, p_o = 1/2, p_e = 3/16 + 3/16 = 3/8 -> kappa = (1/2 - 3/8) / (5/8) = 0.2
    assert cohen_kappa([T, T, T, F], [T, F, F, F]) == (pytest.approx(0.2), None)
    assert cohen_kappa([T, F, T, F], [T, F, T, F])[0] == pytest.approx(1.0)
    assert cohen_kappa([T, F, T, F], [F, T, F, T])[0] == pytest.approx(-1.0)


def test_constant_vectors_never_divide_by_zero():
    kappa, note = cohen_kappa([T, T, T], [T, T, T])
    assert kappa is None and "right on all 3" in note
    kappa, note = cohen_kappa([F, F], [F, F])
    assert kappa is None and "wrong on all 2" in note
    assert cohen_kappa([T, T, T, T], [T, F, T, F]) == (0.0, None)  # one constant: exactly chance
    assert cohen_kappa([T, T], [F, F]) == (0.0, None)  # both constant, opposite
    o = pair_overlap([T, T], [T, T], ["1", "2"], ["1", "2"])
    assert o.kappa is None and o.kappa_note and o.c == 0.0 and o.u == 1.0 and o.w == 0.0
    with pytest.raises(ValueError, match="no problems"):
        cohen_kappa([], [])
    with pytest.raises(ValueError, match="length"):
        cohen_kappa([T], [T, F])


def test_mean_of_paired_draws():
    d1 = pair_overlap([T, F], [T, F], ["1", "2"], ["1", "2"])   # kappa 1, c 0
    d2 = pair_overlap([T, F], [F, T], ["1", "2"], ["3", "4"])   # kappa -1, c 1
    d3 = pair_overlap([T, T], [T, T], ["1", "2"], ["1", "2"])   # kappa undefined
    m = mean_overlap([d1, d2])
    assert m.draws == 2 and m.kappa == pytest.approx(0.0) and m.c == pytest.approx(0.5)
    m3 = mean_overlap([d1, d2, d3])
    assert m3.kappa == pytest.approx(0.0) and "2 of 3 draws" in m3.kappa_note
    assert mean_overlap([d3, d3]).kappa is None


def _row(pid, k, text, gold, decoding="sampled", **extra):
    return {"benchmark": "micro-test", "benchmark_version": "1", "problem_id": pid, "decoding": decoding,
            "sample_index": k, "prompt": "q", "completion": text, "gold": gold, **extra}


def test_outcomes_regrade_the_completion_and_pick_the_sample():
    rows = [_row("p1", 1, "\\boxed{3}", "3"), _row("p1", 0, "\\boxed{4}", "3", correct=True, extracted="3"),
            _row("p1", 0, "\\boxed{3}", "3", decoding="greedy")]
    assert outcomes_from_rows(rows) == {"p1": ("4", False)}  # stored correct=True is not trusted
    assert outcomes_from_rows(rows, sample_index=1) == {"p1": ("3", True)}
    assert outcomes_from_rows(rows, decoding="greedy") == {"p1": ("3", True)}
    with pytest.raises(ConfigError, match="sample_index 5"):
        outcomes_from_rows(rows, sample_index=5)


def test_pairs_are_aligned_by_problem_id_and_a_mismatch_is_one_line():
    a = {"p1": ("1", T), "p2": ("2", F)}
    b = {"p2": ("2", F), "p1": ("9", F)}  # other order: aligned by id
    o = overlap_of(a, b, name_a="A", name_b="B")
    assert o.c == 0.5 and o.w == 0.5 and o.u == 0.5
    with pytest.raises(ConfigError, match=r"1 only in A \(p2\); 1 only in B \(p3\)") as e:
        overlap_of(a, {"p1": ("1", T), "p3": ("1", T)}, name_a="A", name_b="B")
    assert "\n" not in str(e.value)
    pairs = probe_pairs({"m1": [a], "m2": [b], "m3": [a]})
    assert [(p.a, p.b) for p in pairs] == [("m1", "m2"), ("m1", "m3"), ("m2", "m3")]
    assert pairs[1].kappa == pytest.approx(1.0)


# ---------------------------------------------------------------------------------------------- ensemble control
def _samples(pid, gold, answers):
    return [_row(pid, k, f"so \\boxed{{{a}}}", gold) for k, a in enumerate(answers)]


def test_ensemble_majority_on_hand_built_rows():
    rows_a = _samples("p1", "5", ["5", "5", "3", "3"]) + _samples("p2", "1/2", ["0.5", "2", "2", "2"])
    rows_b = _samples("p1", "5", ["3", "3", "5", "5"]) + _samples("p2", "1/2", ["1/2", "0.5", "7", "7"])
    random.Random(0).shuffle(rows_a)  # order in the file does not matter: sample_index does
    s = ensemble_majority(rows_a, rows_b, per_model=2, a="A", b="B")
    assert (s.n_problems, s.per_model, s.k) == (2, 2, 4)
    # p1: pool 5,5 (A) + 3,3 (B): a tie, the first seen (A's 5) wins -> right.  p2: pool 0.5,2 + 1/2,0.5 -> 0.5
    assert s.ensemble_maj == 1.0 and s.ties == 1
    assert s.maj_a == 0.5  # p1: own tie 5,5,3,3 -> 5 right; p2: 2 wrong
    assert s.maj_b == 0.0  # p1: 3,3,5,5 -> 3 wrong; p2: 7 (2 votes) wrong
    assert s.avg_a == pytest.approx((2 / 4 + 1 / 4) / 2) and s.avg_b == pytest.approx((2 / 4 + 2 / 4) / 2)
    # the tie goes exactly where metrics.maj_at_k sends it
    pool = [extract_normalized(f"\\boxed{{{x}}}") for x in ["5", "5", "3", "3"]]
    assert maj_at_k(pool, "5") and not maj_at_k(pool[::-1], "5")
    swapped = ensemble_majority(rows_b, rows_a, per_model=2)
    assert swapped.ensemble_maj == 0.5  # B first: p1's tie now goes to 3


def test_ensemble_refuses_mismatched_problems_and_too_few_samples():
    rows_a = _samples("p1", "5", ["5"] * 4) + _samples("p2", "6", ["6"] * 4)
    rows_b = _samples("p1", "5", ["5"] * 4) + _samples("p3", "6", ["6"] * 4)
    with pytest.raises(ConfigError, match=r"1 only in A \(p2\); 1 only in B \(p3\)"):
        ensemble_majority(rows_a, rows_b, per_model=2, a="A", b="B")
    with pytest.raises(ConfigError, match="needs 8 per model"):
        ensemble_majority(rows_a, rows_a, per_model=4)
    with pytest.raises(ConfigError, match="gold"):
        ensemble_majority(_samples("p1", "5", ["5"] * 2), _samples("p1", "6", ["5"] * 2), per_model=1)


# ---------------------------------------------------------------------------------------------- CLI, stored rows
def _fake_run(root: Path, agents: dict[str, list[str]], gold: list[str], families: list[str]) -> Path:
    """A run directory with base + final micro-test predictions: agent -> its answers (sample k of problem i is
    answers[i] for k < 4 and the gold answer for k >= 4)."""
    root.mkdir(parents=True)
    info = {"run_id": root.name, "method": "corl", "phases": ["base", "final"],
            "agents": [{"name": n, "family": f} for n, f in zip(agents, families)]}
    (root / "run.json").write_text(json.dumps(info))
    for phase in ("base", "final"):
        for name, answers in agents.items():
            d = root / "eval" / phase / name
            d.mkdir(parents=True)
            rows = [_row(f"micro-test-{i:04d}", k, f"x=\\boxed{{{ans if k < 4 else g}}}", g)
                    for i, (ans, g) in enumerate(zip(answers, gold)) for k in range(8)]
            rows += [_row(f"micro-test-{i:04d}", 0, f"\\boxed{{{g}}}", g, decoding="greedy")
                     for i, g in enumerate(gold)]
            (d / "micro-test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


GOLD = ["1", "2", "3", "4", "5", "6"]
RUN_AGENTS = {"a0-qwen2-bpe": ["1", "2", "0.5", "9", "5", "7"], "a1-llama-bpe": ["1", "8", "1/2", "4", "5", "8"]}


def test_probe_from_predictions_through_the_cli(tmp_path):
    run = _fake_run(tmp_path / "run-s0", RUN_AGENTS, GOLD, ["qwen2-bpe", "llama-bpe"])
    out = tmp_path / "probe"
    r = CliRunner().invoke(app, ["probe", str(run), "--from-predictions", "--benchmark", "micro-test",
                                 "--out", str(out)])
    assert r.exit_code == 0, r.output
    data = json.loads((out / "probe.json").read_text())
    (pair,) = data["pairs"]
    assert (pair["a"], pair["b"], pair["n"]) == ("a0-qwen2-bpe", "a1-llama-bpe", 6)
    assert pair["kappa"] == pytest.approx(1 / 3) and pair["c"] == pytest.approx(2 / 6)
    assert pair["w"] == pytest.approx(1 / 6) and pair["u"] == pytest.approx(4 / 6)
    assert data["protocol"]["sample_indices"] == [0] and "at least one" in data["definitions"]["u"]
    assert "| a0-qwen2-bpe | a1-llama-bpe | 6 | 0.33 | 33.3 | 16.7 | 66.7 |" in (out / "probe.md").read_text()
    assert "0.33" in r.output and "a1-llama-bpe" in r.output
    # RUN:agent by name or by family, greedy rows, a file path, the final phase
    r = CliRunner().invoke(app, ["probe", f"{run}:a0-qwen2-bpe", f"{run}:llama-bpe", "--from-predictions",
                                 "--greedy", "-b", "micro-test", "--out", str(out / "g")])
    assert r.exit_code == 0, r.output
    g = json.loads((out / "g" / "probe.json").read_text())["pairs"][0]
    assert g["u"] == 1.0 and g["kappa"] is None and "right on all 6" in g["kappa_note"]
    f = run / "eval" / "final" / "a0-qwen2-bpe" / "micro-test.jsonl"
    r = CliRunner().invoke(app, ["probe", str(f), f"{run}:a1-llama-bpe", "--from-predictions", "--samples", "8",
                                 "-b", "micro-test", "--phase", "final", "--out", str(out / "f")])
    assert r.exit_code == 0, r.output
    assert json.loads((out / "f" / "probe.json").read_text())["pairs"][0]["draws"] == 8
    for bad, msg in ((["probe", f"{run}:nobody", str(run)], "has no agent 'nobody'"),
                     (["probe", f"{run}:a0-qwen2-bpe", "qwen2-bpe@1"], "needs generation"),
                     (["probe", f"{run}:a0-qwen2-bpe", f"{run}:a0-qwen2-bpe"], "given twice")):
        r = CliRunner().invoke(app, bad + ["--from-predictions", "-b", "micro-test", "--out", str(out / "x")])
        assert r.exit_code == 2 and msg in r.output, r.output


def test_ensemble_through_the_cli(tmp_path):
    run = _fake_run(tmp_path / "run-s0", RUN_AGENTS, GOLD, ["qwen2-bpe", "llama-bpe"])
    out = tmp_path / "ens.json"
    r = CliRunner().invoke(app, ["ensemble", str(run), "--benchmark", "micro-test", "--json", str(out)])
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    # per problem the pool is 4 x A's answer + 4 x B's answer; own maj@8 is 4 x answer + 4 x gold (a tie -> answer)
    assert data["maj_a"] == pytest.approx(3 / 6) and data["maj_b"] == pytest.approx(3 / 6)
    # pools: p0 1 | p1 2 v 8 | p2 0.5 v 1/2 (votes compare normalised strings, as maj@k does) | p3 9 v 4 | p4 5 |
    # p5 7 v 8: four 4-4 ties, each won by A's answer -> right on p0, p1, p4
    assert data["ensemble_maj"] == pytest.approx(3 / 6) and data["ties"] == 4 and data["k"] == 8
    assert "ensemble (4 + 4)" in r.output
    r = CliRunner().invoke(app, ["ensemble", f"{run}:a1-llama-bpe", f"{run}:qwen2-bpe", "-b", "micro-test",
                                 "--per-model", "2", "--phase", "base"])
    assert r.exit_code == 0 and "maj@4" in r.output, r.output
    r = CliRunner().invoke(app, ["ensemble", f"{run}:a1-llama-bpe", "-b", "micro-test"])
    assert r.exit_code == 2 and "exactly two models" in r.output
    twin = _fake_run(tmp_path / "run-s1", RUN_AGENTS, GOLD, ["qwen2-bpe", "llama-bpe"])
    r = CliRunner().invoke(app, ["ensemble", f"{run}:a0-qwen2-bpe", f"{twin}:a0-qwen2-bpe", "-b", "micro-test",
                                 "--json", str(out)])
    assert r.exit_code == 0, r.output  # same agent name in two runs: labelled by run
    assert json.loads(out.read_text())["a"] == "run-s0:a0-qwen2-bpe"


def test_from_predictions_never_imports_torch(tmp_path):
    run = _fake_run(tmp_path / "run-s0", RUN_AGENTS, GOLD, ["qwen2-bpe", "llama-bpe"])
    code = ("import sys; from typer.testing import CliRunner; from corl_bench.cli import app; "
            f"r = CliRunner().invoke(app, ['probe', {str(run)!r}, '--from-predictions', '-b', 'micro-test', "
            f"'--out', {str(tmp_path / 'o')!r}]); assert r.exit_code == 0, r.output; "
            f"r = CliRunner().invoke(app, ['ensemble', {str(run)!r}, '-b', 'micro-test']); "
            "assert r.exit_code == 0, r.output; assert 'torch' not in sys.modules; print('ok')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "ok", done.stderr[-2000:]


# ---------------------------------------------------------------------------------------------- real tiny models
@pytest.mark.slow  # ~15-35 s on 2 busy cores: two tokenizers and models are built, 9 completions generated twice
def test_generated_probe_on_tiny_models_resumes(tmp_path):
    from tests.conftest import build_tiny

    folders = []
    for name in ("qwen2-bpe", "llama-bpe"):
        model, tok = build_tiny(name)
        folder = tmp_path / f"tiny-{name}"
        model.save_pretrained(folder)
        tok.save_pretrained(folder)
        folders.append(str(folder))
    out = tmp_path / "probe"
    args = ["probe", *folders, f"{folders[0]}@1", "--benchmark", "micro-test", "--max-problems", "3",
            "--max-new-tokens", "6", "--out", str(out)]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    data = json.loads((out / "probe.json").read_text())
    labels = [m["label"] for m in data["models"]]
    assert labels == ["tiny-qwen2-bpe", "tiny-llama-bpe", "tiny-qwen2-bpe@1"]
    assert [m["seed"] for m in data["models"]] == [0, 0, 1]
    assert len(data["pairs"]) == 3 and all(p["n"] == 3 for p in data["pairs"])
    assert data["protocol"]["decoding"]["temperature"] == 0.8 and data["protocol"]["decoding"]["samples"] == 1
    files = {lab: out / "predictions" / lab / "micro-test.jsonl" for lab in labels}
    rows = [json.loads(x) for x in files["tiny-qwen2-bpe"].read_text().splitlines()]
    assert [(r_["decoding"], r_["sample_index"]) for r_ in rows] == [("sampled", 0)] * 3
    assert rows[0]["prompt"].endswith("?\n")  # the micro prompt: problem text and a newline
    before = {lab: f.read_text() for lab, f in files.items()}
    r = CliRunner().invoke(app, args)  # resumable: nothing is generated again
    assert r.exit_code == 0 and r.output.count("already in") == 3, r.output
    assert {lab: f.read_text() for lab, f in files.items()} == before
    r = CliRunner().invoke(app, args[:-2] + ["--temperature", "0.5", "--out", str(out)])
    assert r.exit_code == 2 and "different decoding" in r.output


def test_eval_targets_accept_run_colon_agent(tmp_path):
    from corl_bench.eval.targets import run_target, targets

    run = _fake_run(tmp_path / "run-s0", RUN_AGENTS, GOLD, ["qwen2-bpe", "llama-bpe"])
    assert [t[0] for t in targets(str(run), "base", None)] == ["a0-qwen2-bpe", "a1-llama-bpe"]  # unchanged
    assert targets(f"{run}:llama-bpe", "base", None) == [("a1-llama-bpe", "llama-bpe",
                                                          run / "eval" / "base" / "a1-llama-bpe")]
    assert run_target(f"{run}:a0-qwen2-bpe") == (run, "a0-qwen2-bpe") and run_target("qwen2-bpe") is None
    with pytest.raises(ConfigError, match="no agent 'x'; its agents: a0-qwen2-bpe, a1-llama-bpe"):
        targets(f"{run}:x", "base", None)
    same = _fake_run(tmp_path / "same", {"a0": GOLD, "a1": GOLD}, GOLD, ["qwen2-bpe", "qwen2-bpe"])
    with pytest.raises(ConfigError, match="2 agents have family qwen2-bpe"):
        targets(f"{same}:qwen2-bpe", "base", None)


def test_probe_models_keep_a_runs_seed_offsets_and_refuse_identical_twins(tmp_path):
    from corl_bench.report.probe import resolve_models

    run = _fake_run(tmp_path / "same", {"a0-qwen2-bpe": GOLD, "a1-qwen2-bpe": GOLD}, GOLD, ["qwen2-bpe"] * 2)
    (run / "config.yaml").write_text("cohort:\n  agents:\n  - {name: a0-qwen2-bpe, seed_offset: 0}\n"
                                     "  - {name: a1-qwen2-bpe, seed_offset: 1}\n")
    models = resolve_models([str(run), "qwen2-bpe@7"], seed=2)
    assert [(m.label, m.ref, m.seed) for m in models] == [("a0-qwen2-bpe", "qwen2-bpe", 2),
                                                          ("a1-qwen2-bpe", "qwen2-bpe", 3),
                                                          ("qwen2-bpe@7", "qwen2-bpe", 7)]
    with pytest.raises(ConfigError, match=r"same model with the same seed; .*\(qwen2-bpe@1\)"):
        resolve_models([f"{run}:a0-qwen2-bpe", "qwen2-bpe"])
    with pytest.raises(ConfigError, match="is not a folder"):
        resolve_models(["no-such-model", "qwen2-bpe"])
