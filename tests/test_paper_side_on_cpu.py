"""The paper's side tables under ``corl-bench table --reference paper`` (issue 27, item 4): the three-agent ring,
CoMAS, text ensemble control and error-overlap probe print in the paper's layout, with our rows beside the paper's
where backbones match (ensemble control: our two-agent TTRL / Co-RL runs; probe: ``probe.json`` files).

Hand-built run directories (no model is run): two agents, Qwen2.5-3B and Llama-3.2-3B-Instruct by hub id, 5 problems
x 8 sampled completions on gsm8k, math500 and amc83, patterns chosen so every number is worked out by hand below.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Optional, Sequence

import pytest

from corl_bench.report import reference, side
from corl_bench.report.layout import build, paper_table
from corl_bench.report.render import render_text, to_markdown

QWEN, LLAMA = "Qwen/Qwen2.5-3B", "meta-llama/Llama-3.2-3B-Instruct"
BENCHES = ("gsm8k", "math500", "amc83")
R, W = True, False
# per problem, 8 samples (True = right, False = the wrong answer 999). Gold of problem i is 10 + i.
# Qwen: own maj@8 = p0 yes, p1 yes (5 vs 3), p2 no (3 vs 5), p3 no, p4 yes (4 vs 4: the right answer is seen first)
#   = 60 %.  Its first 4 samples: RRRR, RRRR, RRRW, WWWW, RRRR.
QWEN_SAMPLES = [[R] * 8, [R] * 5 + [W] * 3, [R] * 3 + [W] * 5, [W] * 8, [R] * 4 + [W] * 4]
# Llama (TTRL runs): own maj@8 = 40 %. Pool of 4 + 4 (Qwen's first): p0 4R 4W tie -> R seen first: yes; p1 yes;
#   p2 7R 1W yes; p3 no; p4 4R 4W tie -> yes  => ensemble 80 %.
LLAMA_SAMPLES = [[W] * 8, [R] * 8, [R] * 8, [W] * 8, [W] * 8]
# Llama (Co-RL run): always right, own maj@8 = 100 %. Pool: p3 = Qwen's WWWW + Llama's RRRR, a tie won by the wrong
#   answer (Qwen's samples come first in the pool) -> ensemble = 4 of 5 = 80 %.
LLAMA_RIGHT = [[R] * 8 for _ in range(5)]


def _write(path: Path, bench: str, samples: Sequence[Sequence[Optional[bool]]]) -> None:
    rows = []
    for i, flags in enumerate(samples):
        gold = str(10 + i)
        for j, ok in enumerate(flags):
            rows.append({"benchmark": bench, "benchmark_version": "1", "problem_id": f"{bench}-{i}", "prompt": "q",
                         "gold": gold, "decoding": "sampled", "sample_index": j, "finished": True,
                         "completion": f"so the result is \\boxed{{{gold if ok else '999'}}}"})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _run(root: Path, run_id: str, method: str, seed: int, llama: list, tag: str = "",
         cohort: str = "cross-family") -> Path:
    run_dir = root / "runs" / run_id
    agents = {"a0-qwen": (QWEN, QWEN_SAMPLES), "a1-llama": (LLAMA, llama)}
    meta = {"run_id": run_id, "method": method, "cohort": cohort, "profile": "hf", "seed": seed, "tag": tag,
            "status": "finished", "steps": 10, "phases": ["final"],
            "agents": [{"name": n, "family": f, "view": "original"} for n, (f, _) in agents.items()]}
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps(meta), encoding="utf-8")
    for name, (_, samples) in agents.items():
        for bench in BENCHES:
            _write(run_dir / "eval" / "final" / name / f"{bench}.jsonl", bench, samples)
    return run_dir


@pytest.fixture()
def pair_runs(tmp_path: Path) -> Path:
    root = tmp_path / "results"
    _run(root, "ttrl-cross-family-s0", "ttrl", 0, LLAMA_SAMPLES)
    _run(root, "ttrl-cross-family-s1", "ttrl", 1, LLAMA_SAMPLES)
    _run(root, "corl-cross-family-s0", "corl", 0, LLAMA_RIGHT)
    _run(root, "ttrl-cross-family-budget-matched-s0", "ttrl", 0, LLAMA_RIGHT, tag="budget-matched")  # tagged: out
    # Co-RL (cross-family+) is not the paper's ensemble pair: out
    _run(root, "corl-cross-family-rephrased-s1", "corl", 1, LLAMA_SAMPLES, cohort="cross-family-rephrased")
    return root


def _side(table, key: str):
    return [b for b in table.side if b.table == key]


# ------------------------------------------------------------------------------------------------- paper only
def test_the_four_side_tables_load_and_render_in_the_papers_layout() -> None:
    tab = paper_table()
    assert [b.table for b in tab.side] == ["n3", "n3", "n3", "comas", "ensLLM", "decPool", "decPool"]
    md = to_markdown(tab)
    for title in ("three-agent ring (n3)", "CoMAS-protocol comparison (comas)", "test-time ensemble control, text (ensLLM)",
                  "pre-RL error-overlap probe (decPool)"):
        assert f"**Paper (Co-RL): {title}, values as printed**" in md
    assert "### Qwen3-1.7B, three-agent ring" in md  # Qwen3-1.7B is only in the three-agent table
    assert ("| Co-RL (Different family) | <u>69.3</u> | **67.6** | **32.7** | <u>64.2</u> | **27.1** | **54.6** | "
            "**15.3** | **47.3** |") in md
    assert "| Method | GSM8K | MATH-500 | HumanEval | MBPP | MMLU | GPQA | SciBench | Avg |" in md
    assert ("| Co-RL (Different family) | **89.5** | **68.6** | **82.32** | **68.00** | **65.80** | <u>29.69</u> | "
            "36.87 | **62.97** |") in md
    assert "| Setting | GSM8K | MATH500 | AMC | Avg |" in md
    assert "| Co-RL (ensemble) | **90.1** | <u>70.8</u> | **39.8** | **66.9** |" in md
    assert "| Pair | level | kappa | c | w | u |" in md and "### 7B tier" in md
    assert "| Qwen2.5-3B × itself | seed only | 0.56 | 22.0 | 4.4 | 62.6 |" in md
    assert "| Llama-3.2-3B × Phi-3.5-mini | different family | 0.31 | 32.8 | 3.0 | 53.0 |" in md
    assert "no row of ours is placed beside it" in md and "(unverified)" in md
    # the paper's ensemble Avg is the mean of its three columns on every row (what the footer claims)
    for row in side.ens_llm()[0].rows:
        *cols, avg = row.values
        assert abs(sum(cols) / 3 - avg) < 0.051, row.label
    records = list(csv.reader(io.StringIO(render_text(tab, "csv"))))
    assert ["block", "row", "source", "level", "kappa", "c", "w", "u", "marks"] in records
    assert ["7B tier", "Qwen2.5-7B × itself", "paper", "seed only", "0.58", "19.0", "5.2", "74.6", ""] in records
    for fmt in ("latex", "html"):
        text = render_text(tab, fmt)
        assert "Qwen3-1.7B-Base" in text and "itself" in text and "62.97" in text and "Setting" in text
    one = paper_table("Qwen2.5-3B")  # --backbone: only that backbone's three-agent block
    assert [(b.table, b.backbone) for b in one.side] == [("n3", "Qwen2.5-3B")]


def test_malformed_side_tables_fail_with_one_line(tmp_path: Path) -> None:
    data = json.loads(reference.PAPER_RESULTS.read_text(encoding="utf-8"))
    data["ensLLM"][0]["vals"] = data["ensLLM"][0]["vals"][:3]
    bad = tmp_path / "paper.json"
    bad.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ValueError, match="ensLLM is malformed .*restore corl_bench/report/paper-results.json"):
        side.ens_llm(bad)
    del data["decPool"][0]["kappa"]
    bad.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ValueError, match="decPool is malformed"):
        side.dec_pool(bad)


# ------------------------------------------------------------------------------------------------- ours beside
def test_our_ensemble_control_stands_beside_the_papers_rows(pair_runs: Path) -> None:
    tab = build(pair_runs, reference="paper")
    (ens,) = _side(tab, "ensLLM")
    labels = [r.label for r in ens.rows]
    assert labels == ["TTRL (Qwen2.5-3B)", "TTRL (Qwen2.5-3B) (ours, n=2)", "TTRL (Llama-3.2-3B)",
                      "TTRL (Llama-3.2-3B) (ours, n=2)", "TTRL (ensemble)", "TTRL (ensemble) (ours, n=2)",
                      "Co-RL (Qwen2.5-3B)", "Co-RL (Qwen2.5-3B) (ours, n=1)", "Co-RL (Llama-3.2-3B)",
                      "Co-RL (Llama-3.2-3B) (ours, n=1)", "Co-RL (ensemble)", "Co-RL (ensemble) (ours, n=1)"]
    rows = {r.label: r for r in ens.rows}
    assert rows["TTRL (ensemble) (ours, n=2)"].printed == ("80.0 ± 0.0",) * 4
    assert rows["TTRL (Llama-3.2-3B) (ours, n=2)"].printed == ("40.0 ± 0.0",) * 4
    assert rows["TTRL (Qwen2.5-3B) (ours, n=2)"].printed == ("60.0 ± 0.0",) * 4
    assert rows["Co-RL (Llama-3.2-3B) (ours, n=1)"].printed == ("100.0",) * 4
    assert rows["Co-RL (ensemble) (ours, n=1)"].printed == ("80.0",) * 4  # the p3 tie goes to Qwen's wrong answer
    assert rows["Co-RL (ensemble) (ours, n=1)"].source == "ours" and rows["Co-RL (ensemble)"].source == "paper"
    assert [k for k, n in tab.side_notes if n.startswith("Rows marked (ours) are 3 run(s)")] == ["ensLLM"]
    md = to_markdown(tab)
    assert "| TTRL (ensemble) (ours, n=2) | 80.0 ± 0.0 | 80.0 ± 0.0 | 80.0 ± 0.0 | 80.0 ± 0.0 |" in md
    # the main table still meets the paper's main table (Qwen2.5-3B, Llama-3.2-3B-Instruct are paper backbones)
    assert any(r.label == "TTRL (paper)" for b in tab.blocks for r in b.rows)
    plain = build(pair_runs)  # without --reference nothing of this is shown
    assert plain.side == () and "ensLLM" not in to_markdown(plain)


def test_too_few_samples_for_the_ensemble_is_a_warning_not_a_row(tmp_path: Path) -> None:
    root = tmp_path / "r"
    _run(root, "ttrl-cross-family-s0", "ttrl", 0, [f[:4] for f in LLAMA_SAMPLES])  # Llama has 4 samples only
    tab = build(root, reference="paper")
    assert not any(r.source == "ours" for b in _side(tab, "ensLLM") for r in b.rows)
    assert any("no ensemble control on gsm8k" in w and "needs 8 per model" in w for w in tab.warnings)


def test_probe_pairs_of_paper_models_stand_beside_the_papers_pair(pair_runs: Path) -> None:
    from corl_bench.report.probe import probe_from_predictions, write_report

    # sample 0: Qwen R R R W R (acc .8), Llama W R R W W (.4): both right 2, exactly one 2 (c 40), both wrong with
    # the same answer 999 on p3 (w 20), u = 1 - both wrong = 80; kappa = (.6 - .44) / .56 = 0.29
    rep = probe_from_predictions([str(pair_runs / "runs" / "ttrl-cross-family-s0")], "gsm8k", phase="final",
                                 out=pair_runs / "probe" / "gsm8k")
    write_report(rep)
    seed_only = {"benchmark": "math500", "models": [{"label": "qwen", "ref": QWEN, "seed": 0},
                                                    {"label": "qwen@1", "ref": QWEN, "seed": 1}],
                 "pairs": [{"a": "qwen", "b": "qwen@1", "n": 500, "kappa": 0.5, "c": 0.25, "w": 0.05, "u": 0.6,
                            "draws": 1}]}
    (pair_runs / "probe" / "seed").mkdir(parents=True)
    (pair_runs / "probe" / "seed" / "probe.json").write_text(json.dumps(seed_only), encoding="utf-8")
    (pair_runs / "probe" / "junk").mkdir()
    (pair_runs / "probe" / "junk" / "probe.json").write_text("{}", encoding="utf-8")
    tab = build(pair_runs, reference="paper")
    three_b = _side(tab, "decPool")[0]
    labels = [r.label for r in three_b.rows]
    at = labels.index("Qwen2.5-3B × Llama-3.2-3B")
    ours = three_b.rows[at + 1]
    assert ours.label == "Qwen2.5-3B × Llama-3.2-3B (ours: probe/gsm8k/probe.json (gsm8k@1, n=5, 1 draw(s)))"
    assert ours.printed == ("different family", "0.29", "40.0", "20.0", "80.0") and ours.source == "ours"
    itself = three_b.rows[labels.index("Qwen2.5-3B × itself") + 1]
    assert itself.printed == ("seed only", "0.50", "25.0", "5.0", "60.0")
    assert sum(r.source == "ours" for b in _side(tab, "decPool") for r in b.rows) == 2
    assert any("probe/junk/probe.json: not a probe report" in w for w in tab.warnings)
    assert [k for k, n in tab.side_notes if n.startswith("2 probe.json file(s)") and "2 pair(s) match" in n] == [
        "decPool"]
    alone = paper_table(root=pair_runs / "probe")  # probes without runs: the paper's tables with ours beside
    assert sum(r.source == "ours" for b in alone.side for r in b.rows) == 2
    md = to_markdown(alone)
    assert md.index("- 2 probe.json file(s) under") > md.index("(decPool), values as printed")


def test_cli_prints_the_side_tables_with_ours(pair_runs: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from corl_bench.cli import app

    res = CliRunner().invoke(app, ["table", "-r", str(pair_runs), "--reference", "paper", "-f", "md",
                                   "--out-dir", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    for text in ("three-agent ring (n3)", "(comas)", "(ensLLM)", "(decPool)", "| Co-RL (ensemble) (ours, n=1) | 80.0"):
        assert text in res.output
    assert "Co-RL (ensemble) (ours, n=1)" in (tmp_path / "out" / "table.csv").read_text(encoding="utf-8")
