"""The paper's cells meet the paper's rows (issue 22, item 3).

A cohort says which of the paper's rows it reproduces (``cohort.paper_row``: different-family, same-family,
different-family+, three-agent); the run records it in run.json and the table labels the run like that row
("Co-RL (cross-family)"), so ``--reference paper`` puts the paper's row of that kind beside ours. Hand-built run
directories check the labelling rules (an older run without the field keeps its label; the three-agent ring meets
the paper's three-agent table); then every shipped ``configs/paper/*.yaml`` runs for one step with tiny stand-in
models of the same cohort structure (random ``save_pretrained`` models served as the paper's hub ids from a local
Hugging Face cache, made-up data) and ``corl-bench table --reference paper`` must print each of its rows right above
the paper's row of that kind.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from corl_bench.report import reference
from corl_bench.report.layout import build
from tests.table_fixtures import make_world_run

REPO = Path(__file__).resolve().parents[1]
PAPER_CONFIGS = sorted((REPO / "configs" / "paper").glob("*.yaml"))
QWEN, LLAMA, QWEN3 = "Qwen/Qwen2.5-3B", "meta-llama/Llama-3.2-3B-Instruct", "Qwen/Qwen3-1.7B-Base"
QWEN7, LLAMA8 = "Qwen/Qwen2.5-7B", "meta-llama/Llama-3.1-8B-Instruct"


def _with_paper_row(run_dir: Path, row: str) -> None:
    meta = json.loads((run_dir / "run.json").read_text())
    (run_dir / "run.json").write_text(json.dumps({**meta, "paper_row": row}))


def _runs(root: Path) -> Path:
    benches = ("gsm8k", "math500")
    seven = {b: (7, 0) for b in benches}
    _with_paper_row(make_world_run(root, "corl-paper-cross-family-s0", "corl", "paper-cross-family", 0,
                                   {"a0": QWEN, "a1": LLAMA}, {"a0": seven, "a1": seven}, {"a0": seven}),
                    "different-family")
    make_world_run(root, "corl-paper-cross-family-old-s1", "corl", "paper-cross-family", 1,  # before paper_row
                   {"a0": QWEN, "a1": LLAMA}, {"a0": seven, "a1": seven})
    _with_paper_row(make_world_run(root, "corl-paper-three-agent-s0", "corl", "paper-three-agent", 0,
                                   {"a0": QWEN, "a1": LLAMA, "a2": QWEN3}, {"a0": seven, "a1": seven, "a2": seven},
                                   {"a2": seven}), "three-agent")
    _with_paper_row(make_world_run(root, "corl-mine-s0", "corl", "mine", 0, {"a0": QWEN, "a1": LLAMA},
                                   {"a0": seven, "a1": seven}), "bogus")
    return root


def test_a_run_is_labelled_by_its_paper_row_and_meets_that_row_of_the_paper(tmp_path: Path) -> None:
    tab = build(_runs(tmp_path / "r"), reference="paper")
    blocks = {b.backbone: b for b in tab.blocks}
    assert [r.label for r in blocks["Qwen2.5-3B"].rows] == [
        "Base", "Base (paper)", "Co-RL (cross-family)", "Co-RL (cross-family) (paper)", "Co-RL (three agents)",
        "Co-RL (three agents) (paper)", "Co-RL (mine)", "Co-RL (paper-cross-family)"]
    rows = {r.label: r for r in blocks["Qwen2.5-3B"].rows}
    assert rows["Co-RL (cross-family)"].run_ids == ("corl-paper-cross-family-s0",)
    assert rows["Co-RL (paper-cross-family)"].run_ids == ("corl-paper-cross-family-old-s1",)  # its old label
    assert [c.mean for c in rows["Co-RL (cross-family) (paper)"].cells[:2]] == pytest.approx([0.801, 0.668])  # llmMain
    assert [c.mean for c in rows["Co-RL (three agents) (paper)"].cells[:2]] == pytest.approx([0.798, 0.663])  # the n3 table
    assert [r.label for r in blocks["Qwen3-1.7B"].rows] == ["Base", "Base (paper)", "Co-RL (three agents)",
                                                             "Co-RL (three agents) (paper)"]
    assert blocks["Qwen3-1.7B"].rows[1].cells[0].mean == pytest.approx(0.67)  # the n3 table's Qwen3-1.7B Base
    assert tab.notes[0].endswith("; three-agent rows from the paper's three-agent ring table.")
    assert any("run.json paper_row 'bogus' is not one of different-family, same-family" in w for w in tab.warnings)


def test_the_three_agent_table_loads_and_names_its_co_rl_rows_as_ours() -> None:
    blocks = reference.n3()
    assert [b.backbone for b in blocks] == ["Qwen2.5-3B", "Llama-3.2-3B-Instruct", "Qwen3-1.7B"]
    assert [r.label for r in blocks[0].rows] == ["Base", "GT-Reward", "TTRL", "Co-RL (Different family)"]
    assert blocks[1].value("Co-RL (three agents)", "Avg") == 44.7 and blocks[1].row("Co-RL (cross-family)") is None
    assert reference.our_label("Co-RL (Different family)", "n3") == "Co-RL (three agents)"
    assert reference.our_label("Co-RL (Different family)") == "Co-RL (cross-family)"
    assert reference.backbone_for(QWEN3) == "Qwen3-1.7B"


# ------------------------------------------------------------------------------ the shipped paper configs, run
TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")
#: the paper's hub id -> (micro family of its tiny stand-in, seed, chat template?)
STAND_INS = {QWEN: ("qwen2-bpe", 0, False), LLAMA: ("llama-bpe", 1, True), QWEN3: ("neox-bpe", 2, False),
             QWEN7: ("qwen2-bpe", 3, False), LLAMA8: ("llama-bpe", 4, True)}
#: what each config's table must show: backbone block -> (our row, the paper's row beside it)
EXPECTED = {
    "corl-cross-family": {"Qwen2.5-3B": "Co-RL (cross-family)", "Llama-3.2-3B-Instruct": "Co-RL (cross-family)"},
    "corl-cross-family-7b": {"Qwen2.5-7B": "Co-RL (cross-family)", "Llama-3.1-8B-Instruct": "Co-RL (cross-family)"},
    "corl-same-family": {"Qwen2.5-3B": "Co-RL (same family)"},
    "corl-three-agent": {"Qwen2.5-3B": "Co-RL (three agents)", "Llama-3.2-3B-Instruct": "Co-RL (three agents)",
                         "Qwen3-1.7B": "Co-RL (three agents)"},
    "gt-reward-llama-3.2-3b-instruct": {"Llama-3.2-3B-Instruct": "GT-Reward"},
    "gt-reward-qwen2.5-3b": {"Qwen2.5-3B": "GT-Reward"},
    "ttrl-llama-3.2-3b-instruct": {"Llama-3.2-3B-Instruct": "TTRL"},
    "ttrl-qwen2.5-3b": {"Qwen2.5-3B": "TTRL"},
}
PROBLEMS = [("What is {a} plus {b}?", lambda a, b: a + b), ("What is {a} times {b}?", lambda a, b: a * b)]


def _fake_hub(root: Path, repo: str, family: str, seed: int, chat: bool) -> None:
    """A tiny random model in the huggingface_hub cache layout under the paper's hub id."""
    from tests.conftest import build_tiny

    model, tok = build_tiny(family, seed=seed)
    if chat:
        tok.chat_template = TEMPLATE
    base = root / ("models--" + repo.replace("/", "--"))
    (base / "refs").mkdir(parents=True)
    (base / "refs" / "main").write_text("0123abcd")
    model.save_pretrained(base / "snapshots" / "0123abcd")
    tok.save_pretrained(base / "snapshots" / "0123abcd")


def _data(root: Path) -> Path:
    """Made-up stand-ins of MATH-Level345 (training) and MATH-500 (evaluation), disjoint."""
    for rel, n, offset in (("math_level345/train.jsonl", 8, 0), ("math500/test.jsonl", 2, 50)):
        rows = [{"id": f"{rel.split('/')[0]}-{i}", "problem": PROBLEMS[i % 2][0].format(a=i + offset, b=3),
                 "answer": str(PROBLEMS[i % 2][1](i + offset, 3))} for i in range(n)]
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def paper_results(tmp_path_factory) -> Path:
    """Every configs/paper/*.yaml run for one tiny step, unchanged but for sizes, data and devices, into one
    results directory: in one process on the CPU with the hf engine (their GPU setting, Ray actors, vLLM and FSDP2
    ranks, is checked by validate in tests/test_hf_profile_on_cpu.py); the bf16 autocast stays on."""
    from corl_bench.config import load_config
    from corl_bench.train.runner import run

    root = tmp_path_factory.mktemp("paper")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_CACHE", str(root / "hub"))
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("CORL_BENCH_CACHE", str(root / "cache"))
        mp.delenv("CORL_BENCH_DATA", raising=False)
        for repo, (family, seed, chat) in STAND_INS.items():
            _fake_hub(root / "hub", repo, family, seed, chat)
        data = _data(root / "data")
        for path in PAPER_CONFIGS:
            cfg = load_config(path, [
                "run.steps=1", "rollout.prompts_per_step=2", "rollout.samples_per_prompt=2",
                "rollout.max_new_tokens=4", "eval.max_problems=2", "eval.max_new_tokens=4", "eval.every=0",
                "run.checkpoint_every=0", "run.save_checkpoints=false", "memory.micro_batch=4",
                "memory.gradient_checkpointing=false", "model.threads=1", f"data.data_dir={data}",
                "run.backend=local", "run.gpus_per_agent=0", "rollout.backend=hf", "rollout.engine_options={}",
                f"run.output_dir={root / 'results'}", f"run.run_id={path.stem}"])
            agents = tuple(dataclasses.replace(a, device="cpu") for a in cfg.cohort.agents)  # no GPUs here
            run(cfg.replace(cohort=dataclasses.replace(cfg.cohort, agents=agents)), auto_resume=False)
    return root / "results"


def test_every_paper_config_has_an_expected_row() -> None:
    assert sorted(EXPECTED) == sorted(p.stem for p in PAPER_CONFIGS)  # a new paper config names its rows here


def test_each_paper_configs_rows_sit_right_above_the_papers_row_of_that_kind(paper_results: Path,
                                                                             tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from corl_bench.cli import app

    out = tmp_path / "table.md"
    res = CliRunner().invoke(app, ["table", "-r", str(paper_results), "--reference", "paper", "--format", "md",
                                   "--out", str(out)])
    assert res.exit_code == 0, res.output
    md = out.read_text(encoding="utf-8")
    blocks = {}  # backbone -> its table lines
    for part in md.split("\n### ")[1:]:
        head, *lines = part.splitlines()
        blocks[head.split("(paper backbone ")[-1].rstrip(")")] = [ln for ln in lines if ln.startswith("| ")]
    tab = build(paper_results, reference="paper")
    for stem, rows in EXPECTED.items():
        info = json.loads((paper_results / stem / "run.json").read_text())
        assert info["status"] == "finished", stem
        for backbone, label in rows.items():
            lines = blocks[backbone]
            ours = [i for i, ln in enumerate(lines) if ln.startswith(f"| {label} ") and "(paper)" not in ln]
            assert ours, (stem, backbone, label, lines)
            after = lines[ours[-1] + 1]
            assert after.startswith(f"| {label} (paper) |"), (stem, backbone, after)
            block = next(b for b in tab.blocks if b.backbone == backbone)  # the row holds this config's run
            assert any(stem in r.run_ids for r in block.rows if r.group == label and r.kind != "paper"), stem
