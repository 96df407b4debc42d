"""The paper's VLM cells meet the paper's VLM rows (issue 24, item 5).

``configs/paper/vlm/`` holds the small-tier cells of the paper's vision-language tables (``vlmSmall``): Co-RL
Qwen2.5-VL-3B x InternVL3.5-2B and the same-family pair, TTRL, GT-Reward and MM-UPT for each backbone, each trained on
open-r1 and on MMR1. A vision-language table has a block per (backbone, training set), as the paper's, and under
``--reference paper`` a row meets the paper's row of its label in the block of its own training set (never the other
one: the paper's open-r1 and MMR1 blocks used different graders). Hand-built run directories check the rules; then
every shipped config runs for one step with tiny random checkpoints of the real architectures served as the paper's
hub ids (:mod:`corl_bench.models.tiny_vlm`; made-up local data) and ``corl-bench table --reference paper --metric
greedy`` must print each of its rows right above the paper's row of that kind, where the paper has one.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from corl_bench.report import reference
from corl_bench.report.layout import build
from corl_bench.report.cells import fmt_pct
from corl_bench.report.methods import describe
from corl_bench.report.render import render_text, to_markdown
from tests.vlm_fixtures import make_vlm_run

REPO = Path(__file__).resolve().parents[1]
VLM_CONFIGS = sorted((REPO / "configs" / "paper" / "vlm").glob("*.yaml"))
PAPER = json.loads(reference.PAPER_RESULTS.read_text(encoding="utf-8"))
PAPER_VLM = ("mathvision", "mathverse_testmini", "mathvista_testmini", "wemath_testmini")
QWEN_VL, INTERN_VL = "Qwen/Qwen2.5-VL-3B-Instruct", "OpenGVLab/InternVL3_5-2B-HF"
#: a config's cell (Co-RL) or method -> the label of its rows
LABELS = {"corl-cross-family": "Co-RL (cross-family)", "corl-same-family": "Co-RL (same family)", "ttrl": "TTRL",
          "gt-reward": "GT-Reward", "mm-upt": "MM-UPT"}
IN_PAPER = {"Co-RL (cross-family)", "TTRL", "GT-Reward"}  # the vlmSmall rows our cells reproduce


def label(method: str, cohort: str, paper_row: str = "") -> str:
    return describe(method).row(cohort, paper_row)[1]


def pct(stat: Any) -> Any:
    return None if stat.mean is None else round(100 * stat.mean, 4)


def paper_block(backbone: str, dataset: str) -> dict[str, Any]:
    return next(b for b in PAPER["vlmSmall"] if b["backbone"] == backbone and b["dataset"] == dataset)


# ---------------------------------------------------------------------------------------- hand-built run dirs
def test_vlm_runs_meet_the_papers_block_of_their_own_training_set(tmp_path: Path) -> None:
    """Co-RL Qwen2.5-VL-3B x InternVL3.5-2B and TTRL runs on open-r1 and on MMR1, MM-UPT on MMR1: a block per
    (backbone, training set) in the paper's order, each row beside the paper's row of its own training set; runs of
    one seed on the two sets never collide; MM-UPT (not in the paper's tables) has no paper row."""
    root = tmp_path / "r"
    every = {b: (6, 3) for b in PAPER_VLM}
    lower = {b: (4, 2) for b in PAPER_VLM}
    for train, ds in (("multimodal-open-r1-8k-verified", "open-r1"), ("mmr1", "mmr1")):
        make_vlm_run(root, f"corl-cross-{ds}-s0", "corl", f"paper-vlm-cross-family-{ds}", 0,
                     {"a0-qwen": QWEN_VL, "a1-intern": INTERN_VL}, {"a0-qwen": every, "a1-intern": every},
                     {"a0-qwen": lower, "a1-intern": lower}, profile="hf", train=train, paper_row="different-family")
        make_vlm_run(root, f"ttrl-qwen-{ds}-s0", "ttrl", f"paper-vlm-qwen2.5-vl-3b-{ds}", 0, {"a0-qwen": QWEN_VL},
                     {"a0-qwen": lower}, {"a0-qwen": lower}, profile="hf", train=train)
    make_vlm_run(root, "mm-upt-qwen-mmr1-s0", "mm-upt", "paper-vlm-qwen2.5-vl-3b-mmr1", 0, {"a0-qwen": QWEN_VL},
                 {"a0-qwen": every}, profile="hf", train="mmr1")
    tab = build(root, reference="paper", metrics=("greedy",))
    assert [(b.family, b.dataset) for b in tab.blocks] == [(QWEN_VL, "open-r1"), (QWEN_VL, "MMR1"),
                                                           (INTERN_VL, "open-r1"), (INTERN_VL, "MMR1")]
    assert not any("comes from" in w for w in tab.warnings)
    corl, ttrl, mmupt = label("corl", "x", "different-family"), label("ttrl", "x"), label("mm-upt", "x")
    for block in tab.blocks:
        backbone = reference.backbone_for(block.family)
        printed = {reference.our_label(r["method"]): [float(v) for v in r["vals"]]
                   for r in paper_block(backbone, block.dataset)["rows"]}
        ours = [ttrl, corl] if block.family == QWEN_VL else [corl]  # the paper's row order
        want = ["Base", "Base (paper)"] + [x for name in ours for x in (name, f"{name} (paper)")]
        if (block.family, block.dataset) == (QWEN_VL, "MMR1"):
            want.append(mmupt)
        assert [r.label for r in block.rows] == want, (block.family, block.dataset)
        rows = {r.label: r for r in block.rows}
        for name in ["Base", *ours]:
            assert [pct(c) for c in rows[f"{name} (paper)"].cells] == printed[name], (block.dataset, name)
        assert rows[corl].run_ids == (f"corl-cross-{block.dataset.lower()}-s0",)
    assert tab.notes[0] == ("--reference paper: rows marked (paper) hold the paper's printed values for "
                            "InternVL-3.5-2B, Qwen2.5-VL-3B (trained on open-r1, MMR1; each block beside the paper's "
                            "block of its own training set) on MathVision, MathVerse, MathVista, We-Math (greedy "
                            "columns only; not ranked).")
    md = to_markdown(tab)
    assert f"### {QWEN_VL}, trained on MMR1 (paper backbone Qwen2.5-VL-3B)" in md.splitlines()
    assert paper_block("Qwen2.5-VL-3B", "MMR1")["rows"][2]["vals"][0] == "17.99"  # TTRL's MathVision on MMR1 ...
    assert f"| {ttrl} (paper) |  | 18.0 |" in md  # ... at display precision (on open-r1: 21.15)
    rows = list(csv.reader(io.StringIO(render_text(tab, "csv").split("\n#")[0])))
    assert {r[0] for r in rows[1:]} == {f"{f}, trained on {d}" for f in (QWEN_VL, INTERN_VL)
                                        for d in ("open-r1", "MMR1")}
    assert any(line.startswith("Base (base-phase evaluation, per seed from the block's first run in row order): "
                               f"{QWEN_VL}, trained on open-r1 from ") for line in tab.footer)


def test_a_vlm_run_on_another_training_set_meets_the_open_r1_block_and_text_tables_do_not_split(tmp_path) -> None:
    """A vision-language run trained on any other set (or before data.train was read) meets the paper's open-r1
    block, in one block per family as before; text runs never split by training set."""
    root = tmp_path / "r"
    every = {b: (6, 3) for b in PAPER_VLM}
    make_vlm_run(root, "ttrl-geo-s0", "ttrl", "single", 0, {"a0": QWEN_VL}, {"a0": every}, {"a0": every},
                 profile="hf", train="geometry3k")
    make_vlm_run(root, "ttrl-old-s1", "ttrl", "single", 1, {"a0": QWEN_VL}, {"a0": every}, {"a0": every}, profile="hf")
    tab = build(root, reference="paper", metrics=("greedy",))
    assert [(b.family, b.dataset) for b in tab.blocks] == [(QWEN_VL, "")]
    ttrl = next(r for r in tab.blocks[0].rows if r.label == "TTRL (paper)")
    open_r1 = next(r for r in paper_block("Qwen2.5-VL-3B", "open-r1")["rows"] if r["method"] == "TTRL")
    assert [pct(c) for c in ttrl.cells] == [float(v) for v in open_r1["vals"]]
    assert "(trained on open-r1)" in tab.notes[0]


# ---------------------------------------------------------------------------------------- the shipped configs, run
@pytest.fixture(scope="module")
def vlm_results(tmp_path_factory) -> Path:
    """Every configs/paper/vlm/*.yaml run for one tiny step, unchanged but for sizes, data and devices, into one
    results directory: tiny random Qwen2.5-VL and InternVL checkpoints (their real classes, processors and chat
    templates) under the paper's hub ids in a local Hugging Face cache; made-up local copies of MMR1, open-r1 and
    the four benchmarks."""
    from corl_bench.config import load_config
    from corl_bench.models.tiny_vlm import build as build_vlm
    from corl_bench.train.runner import run
    from tests.test_mm_train_data_on_cpu import local_set
    from tests.test_real_vlm_eval_on_cpu import data_dir

    root = tmp_path_factory.mktemp("paper_vlm")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_CACHE", str(root / "hub"))
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("CORL_BENCH_CACHE", str(root / "cache"))
        mp.delenv("CORL_BENCH_DATA", raising=False)
        for repo, arch, seed in ((QWEN_VL, "qwen2.5-vl", 0), (INTERN_VL, "internvl", 1)):
            base = root / "hub" / ("models--" + repo.replace("/", "--"))
            (base / "refs").mkdir(parents=True)
            (base / "refs" / "main").write_text("0123abcd")
            build_vlm(arch, base / "snapshots" / "0123abcd", seed=seed)
        data = data_dir(root / "data")  # the four benchmarks (MathVision as its testmini fixture)
        (data / "mathvision" / "test.jsonl").write_text((data / "mathvision" / "testmini.jsonl").read_text())
        local_set(data, "mmr1")
        local_set(data, "multimodal_open_r1")
        for path in VLM_CONFIGS:
            cfg = load_config(path, [
                "run.steps=1", "rollout.prompts_per_step=2", "rollout.samples_per_prompt=2",
                "rollout.max_new_tokens=4", "eval.max_problems=2", "eval.max_new_tokens=4",
                "run.checkpoint_every=0", "run.save_checkpoints=false", "memory.gradient_checkpointing=false",
                "model.threads=1", f"data.data_dir={data}", f"run.output_dir={root / 'results'}",
                # their GPU setting (Ray actors, vLLM) is checked by validate in tests/test_hf_profile_on_cpu.py
                "run.backend=local", "run.gpus_per_agent=0", "rollout.backend=hf", "rollout.engine_options={}",
                f"run.run_id={path.stem}"])
            agents = tuple(dataclasses.replace(a, device="cpu") for a in cfg.cohort.agents)  # no GPUs here
            run(cfg.replace(cohort=dataclasses.replace(cfg.cohort, agents=agents)), auto_resume=False)
    return root / "results"


def test_each_paper_vlm_configs_rows_sit_right_above_the_papers_row_of_its_training_set(vlm_results: Path,
                                                                                       tmp_path: Path) -> None:
    from corl_bench.cli import app
    from corl_bench.config import load_config

    out = tmp_path / "table.md"
    res = CliRunner().invoke(app, ["table", "-r", str(vlm_results), "--reference", "paper", "--metric", "greedy",
                                   "--format", "md", "--out", str(out)])
    assert res.exit_code == 0, res.output
    blocks = {}  # block heading -> its table lines
    for part in out.read_text(encoding="utf-8").split("\n### ")[1:]:
        head, *lines = part.splitlines()
        blocks[head] = [ln for ln in lines if ln.startswith("| ")]
    assert len(blocks) == 4  # two backbones x two training sets
    for path in VLM_CONFIGS:
        cfg = load_config(path)
        info = json.loads((vlm_results / path.stem / "run.json").read_text())
        assert info["status"] == "finished" and info.get("paper_row", "") == cfg.cohort.paper_row, path.stem
        cell = path.stem.removesuffix("-open-r1").removesuffix("-mmr1")
        ours = LABELS[cell if cfg.method.name == "corl" else cfg.method.name]
        assert label(cfg.method.name, cfg.cohort.name, cfg.cohort.paper_row) == ours
        dataset = reference.PAPER_VLM_DATASETS[cfg.data.train]
        for family in {a.family for a in cfg.cohort.agents}:
            backbone = reference.backbone_for(family)
            lines = blocks[f"{family}, trained on {dataset} (paper backbone {backbone})"]
            mine = [i for i, ln in enumerate(lines) if ln.startswith(f"| {ours} ") and "(paper)" not in ln]
            assert mine, (path.stem, family, lines)
            after = lines[mine[-1] + 1] if mine[-1] + 1 < len(lines) else ""
            assert after.startswith(f"| {ours} (paper) |") == (ours in IN_PAPER), (path.stem, family, after)
            if ours in IN_PAPER:
                printed = next(r for r in paper_block(backbone, dataset)["rows"]
                               if reference.our_label(r["method"]) == ours)["vals"]
                assert [c.strip() for c in after.split("|")[3:8]] == [fmt_pct(float(v) / 100) for v in printed]
