"""What the table reports beside mean ± sd (issue 27, item 5): the evaluation's standard error per cell, the share cut
at the token cap per cell, the protocol footer (prompt template and chat-template use, grader version, engine and
its versions), and a warning where a benchmark was evaluated with fewer samples than its spec asks for (AIME and
AMC23 ask for avg@16). Hand-built runs of tests/table_fixtures.py; every number is worked out in the comments."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
import yaml

from corl_bench.eval.metrics import score_predictions, standard_error
from corl_bench.eval.specs import get_spec
from corl_bench.report.layout import build
from corl_bench.report.render import render_text, to_csv
from tests.table_fixtures import Q, make_world_run

REPO = Path(__file__).resolve().parents[1]


def test_standard_error_is_the_sd_over_problems_over_root_n() -> None:
    assert standard_error([1.0, 0.0]) == pytest.approx(0.5)  # sd 0.7071 / sqrt 2
    assert standard_error([1, 1, 1, 0, 0]) == pytest.approx((0.3 ** 0.5) / 5 ** 0.5)
    assert standard_error([0.5]) is None and standard_error([]) is None
    rows = [{"problem_id": str(i), "decoding": d, "completion": f"\\boxed{{{a}}}", "gold": "1", "sample_index": j}
            for i, answers in enumerate([("1", "1"), ("1", "2"), ("2", "2")]) for j, a in enumerate(answers)
            for d in ("sampled",)]
    s = score_predictions(rows)
    # avg@2 per problem 1, .5, 0: sd .5, se .5 / sqrt 3; maj@2 1, 1 (tie: first seen), 0; pass@2 1, 1, 0
    assert s.avg_k == pytest.approx(0.5) and s.avg_k_se == pytest.approx(0.5 / 3 ** 0.5)
    assert s.standard_errors()["maj_k"] == pytest.approx(standard_error([1, 1, 0]))
    assert s.greedy_se is None and set(s.metrics()) == {"greedy", "avg_k", "maj_k", "pass_k", "extraction_failure",
                                                        "clipped"}


@pytest.fixture()
def two_seeds(tmp_path: Path) -> Path:
    root = tmp_path / "r"
    # 5 problems x 2 samples; the first N samples (problem-major) are right.
    # s0: alpha 6 -> per problem 1 1 1 0 0 (pass@1 60, se sqrt(.3)/sqrt(5) = 24.49); beta 4 -> 1 1 0 0 0 (se 24.49)
    # s1: alpha 4 -> 1 1 0 0 0 (40, se 24.49); beta 5 -> 1 1 .5 0 0 (50, sd .5 -> se 22.36)
    make_world_run(root, "ttrl-single-s0", "ttrl", "single", 0, {Q: "qwen2-bpe"},
                   {Q: {"alpha": (6, 0), "beta": (4, 0)}}, {Q: {"alpha": (2, 0), "beta": (2, 0)}})
    make_world_run(root, "ttrl-single-s1", "ttrl", "single", 1, {Q: "qwen2-bpe"},
                   {Q: {"alpha": (4, 0), "beta": (5, 0)}}, {Q: {"alpha": (2, 0), "beta": (2, 0)}})
    return root


def test_each_cell_carries_its_evaluation_standard_error_and_truncation_share(two_seeds: Path) -> None:
    tab = build(two_seeds)
    ttrl = next(r for r in tab.blocks[0].rows if r.label == "TTRL")
    se_a, se_b1 = (0.3 ** 0.5) / 5 ** 0.5, 0.5 / 5 ** 0.5
    assert ttrl.cells[0].se == pytest.approx(se_a)  # alpha: 24.49 in both seeds
    assert ttrl.cells[1].se == pytest.approx((se_a + se_b1) / 2)  # beta: mean of 24.49 and 22.36
    # Avg: per seed sqrt(se_alpha^2 + se_beta^2) / 2, then the mean over seeds
    avg_se = ((2 * se_a ** 2) ** 0.5 / 2 + (se_a ** 2 + se_b1 ** 2) ** 0.5 / 2) / 2
    assert ttrl.cells[2].se == pytest.approx(avg_se)
    assert ttrl.cells[0].clipped == 0.0
    records = list(csv.DictReader(io.StringIO("".join(
        line + "\n" for line in to_csv(tab).splitlines() if not line.startswith("#")))))
    row = next(r for r in records if r["row"] == "TTRL")
    assert row["alpha pass@1"] == "50.0000" and row["alpha pass@1 sd"] == "14.1421"
    assert row["alpha pass@1 se"] == "24.4949" and row["beta pass@1 se"] == f"{100 * (se_a + se_b1) / 2:.4f}"
    assert row["Avg se"] == f"{100 * avg_se:.4f}" and row["alpha pass@1 clipped"] == "0.0000"
    md = render_text(tab, "md")
    # alpha 60 / 40, beta 40 / 50 -> 50.0 ± 14.1, 45.0 ± 7.1, Avg 47.5 ± 3.5 (bold: the only label-free row)
    assert "| TTRL | 2 | **50.0 ± 14.1** | **45.0 ± 7.1** | **47.5 ± 3.5** |" in md  # no se unless asked for
    assert ("Evaluation standard error per cell (sample sd over problems / √problems, mean over seeds; the sampling "
            "error of the benchmark, not the spread over seeds): 20.0–24.5 pp for pass@1") in md  # Base: 1 0 0 0 0, se 20.0
    shown = render_text(build(two_seeds, se=True), "md")
    assert "| TTRL | 2 | **50.0 ± 14.1 [se 24.5]** | **45.0 ± 7.1 [se 23.4]** | **47.5 ± 3.5 [se 17.0]** |" in shown


def test_the_footer_states_prompt_grader_and_engine_versions(tmp_path: Path) -> None:
    root = tmp_path / "r"
    run = make_world_run(root, "ttrl-single-s0", "ttrl", "single", 0, {Q: "qwen2-bpe"},
                         {Q: {"gsm8k": (6, 0), "alpha": (6, 0)}})
    cfg = yaml.safe_load((run / "config.yaml").read_text(encoding="utf-8"))
    cfg["rollout"] = {"backend": "vllm"}
    (run / "config.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    (run / "env.json").write_text(json.dumps({"packages": {"vllm": "0.17.1", "torch": "2.10.0",
                                                           "transformers": "4.57.6", "math-verify": "0.8.0"}}))
    footer = "\n".join(build(root).footer)
    prompt = json.dumps(get_spec("gsm8k").prompt, ensure_ascii=False)
    assert f"Prompts: gsm8k: {prompt} (chat template yes)." in footer
    assert ("Grading: math answers by math-verify 0.8.0 (the runs' env.json), regraded here from the stored "
            "completions.") in footer
    assert "Engine (rollout.backend, which also generates the evaluations): vllm (vllm 0.17.1, torch 2.10.0)." in footer
    assert "max_new_tokens 40" in footer and "Checkpoint: final checkpoint after 50 steps" in footer
    (run / "env.json").unlink()
    bare = "\n".join(build(root).footer)
    assert "math-verify (version not recorded)" in bare and "Engine (rollout.backend, which also generates the " \
        "evaluations): vllm." in bare


def test_aime_and_amc23_ask_for_sixteen_samples_and_fewer_is_warned(tmp_path: Path) -> None:
    from corl_bench.eval.specs import spec_from_yaml

    def shipped(name: str):  # this checkout's file (an editable install may map corl_bench.benchmarks elsewhere)
        return spec_from_yaml(f"benchmarks/{name}.yaml", (REPO / "benchmarks" / f"{name}.yaml").read_text("utf-8"))

    assert {b: shipped(b).decoding.samples for b in ("aime24", "aime25", "amc23", "amc83")} == {
        "aime24": 16, "aime25": 16, "amc23": 16, "amc83": 8}  # amc83 is the paper's AMC column: avg@8 as printed
    assert {shipped(b).version for b in ("aime24", "aime25", "amc23")} == {"2"}
    asked = get_spec("aime24").decoding.samples  # the registered spec (16 once installed from this checkout)
    root = tmp_path / "r"
    make_world_run(root, "ttrl-single-s0", "ttrl", "single", 0, {Q: "qwen2-bpe"}, {Q: {"aime24": (6, 0)}},
                   version="2")
    tab = build(root)
    assert any(w.startswith("aime24: predictions hold k=2 sampled completions per problem but its spec asks for "
                            f"{asked}") for w in tab.warnings)
    assert "aime24 pass@1" in render_text(tab, "md")
