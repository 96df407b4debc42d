"""CPU tests of the vision-language tables: runs of the micro visual world (tests/vlm_fixtures.py) in the layout of the
paper's VLM tables, and the paper's vlmSmall / vlmLarge / ensVLM blocks under ``--reference paper``, every number read
from corl_bench/report/paper-results.json."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from corl_bench.cli import app
from corl_bench.report import kinds, reference
from corl_bench.report.layout import build, paper_table
from corl_bench.report.cells import VLM, PaperTable
from corl_bench.report.methods import describe
from corl_bench.report.render import render_text, to_markdown
from corl_bench.report.table import main
from tests.table_fixtures import build_world
from tests.vlm_fixtures import BENCH, FAMILIES, LV, QV, build_visual_world, make_vlm_run

PAPER = json.loads(reference.PAPER_RESULTS.read_text(encoding="utf-8"))
VLM_KEYS = ("vlmSmall", "vlmLarge")
PAPER_VLM = ("mathvision", "mathverse_testmini", "mathvista_testmini", "wemath_testmini")


def label(method: str, cohort: str) -> str:
    """The row label the method declares for a cohort (whatever cohort_labels say today)."""
    return describe(method).row(cohort)[1]


def pct(stat: Any) -> Any:
    return None if stat.mean is None else round(100 * stat.mean, 4)


def rows_of(tab: PaperTable, family: str) -> dict[str, Any]:
    return {row.label: row for row in next(b for b in tab.blocks if b.family == family).rows}


@pytest.fixture(scope="module")
def visual(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_visual_world(tmp_path_factory.mktemp("visual") / "results")


# ---------------------------------------------------------------------------------------------------- our runs
def test_micro_visual_runs_get_a_vision_language_table_recomputed_from_predictions(visual: Path) -> None:
    tab = build(visual)
    assert tab.kind == VLM and tab.also == () and tab.benchmarks == (BENCH,)
    assert [c.header for c in tab.columns] == [f"{BENCH} pass@1", "Avg", "Δ"]
    corl, ttrl, mmupt = label("corl", "visual-cross-family"), label("ttrl", "visual-single"), \
        label("mm-upt", "visual-single")
    qwen, llava = rows_of(tab, FAMILIES[QV]), rows_of(tab, FAMILIES[LV])
    # the stored `correct` is True everywhere: these numbers only come from regrading the completions
    assert list(qwen) == ["Base", ttrl, corl]
    assert {k: (pct(r.cells[0]), pct(r.cells[1])) for k, r in qwen.items()} == {
        "Base": (40.0, 40.0), ttrl: (60.0, 60.0), corl: (80.0, 80.0)}
    assert {k: (pct(r.cells[0]), pct(r.cells[1])) for k, r in llava.items()} == {
        "Base": (20.0, 20.0), corl: (60.0, 60.0), mmupt: (50.0, 50.0)}
    assert round(100 * qwen[corl].delta, 4) == 40.0 and round(100 * llava[mmupt].delta, 4) == 30.0
    assert qwen[corl].marks == ("b", "b", "b") and qwen[ttrl].marks == ("u", "u", "u")
    assert qwen["Base"].run_ids == ("ttrl-visual-single-s0",) and llava["Base"].run_ids == (
        "corl-visual-cross-family-s0",)
    md = to_markdown(tab)
    assert md.startswith("**corl-bench results, vision-language (paper style)**")
    assert f"| {corl} | 1 | **80.0** | **80.0** | **+40.0** |" in md
    assert f"| {mmupt} | 1 | <u>50.0</u> | <u>50.0</u> | <u>+30.0</u> |" in md
    greedy = build(visual, metrics=("greedy",))
    assert pct(rows_of(greedy, FAMILIES[QV])[corl].cells[0]) == 80.0
    assert pct(rows_of(greedy, FAMILIES[LV])[mmupt].cells[0]) == 40.0


def test_text_and_vision_language_runs_get_a_table_each(visual: Path, tmp_path: Path) -> None:
    text_only = build_world(tmp_path / "text", only=["gt-reward-single-s0", "ttrl-single-s0"])
    both = build_world(tmp_path / "both", only=["gt-reward-single-s0", "ttrl-single-s0"])
    build_visual_world(both)
    alone, tab = build(text_only), build(both)
    assert tab.kind == "text" and [t.kind for t in tab.also] == [VLM]
    assert tab.benchmarks == alone.benchmarks == ("alpha", "beta") and tab.also[0].benchmarks == (BENCH,)
    assert [b.family for b in tab.also[0].blocks] == ["llava-micro", "qwen2vl-micro"]
    for fmt in ("md", "latex", "csv", "html"):  # the text table exactly as alone, then the other one
        assert render_text(tab, fmt).startswith(render_text(alone, fmt)), fmt
        assert render_text(tab, fmt).endswith(render_text(tab.also[0], fmt)), fmt
    assert "vision-language" in render_text(tab, "latex") and "qwen2vl-micro" in render_text(tab, "html")


def test_multimodal_benchmarks_follow_the_papers_columns_and_empty_ones_show_a_dash(tmp_path: Path) -> None:
    root = tmp_path / "r"
    counts = {"wemath_testmini": (6, 3), "mathvista_testmini": (4, 2), "mathvision_testmini": (2, 1)}
    make_vlm_run(root, "ttrl-visual-single-s0", "ttrl", "visual-single", 0, {QV: FAMILIES[QV]}, {QV: counts},
                 {QV: counts})
    tab = build(root, metrics=("greedy",))
    assert tab.kind == VLM
    assert tab.benchmarks == ("mathvision_testmini", "mathvista_testmini", "wemath_testmini")  # with predictions
    assert [c.benchmark for c in tab.columns if c.kind == "value"] == [
        "mathvision_testmini", "mathverse_testmini", "mathvista_testmini", "wemath_testmini"]  # the paper's order
    row = rows_of(tab, FAMILIES[QV])[label("ttrl", "visual-single")]
    values = [pct(c) for c in row.cells]
    assert values[1] is None and None not in values[:1] + values[2:]
    assert values[-1] == pytest.approx(sum(v for v in values[:-1] if v is not None) / 3, abs=1e-3)
    md = to_markdown(tab)
    assert "| mathvision_testmini greedy | mathverse_testmini greedy | mathvista_testmini greedy |" in md
    assert f"| {row.label} | 1 | **{values[0]:.1f}** | – | **" in md  # the only ranked row: bold
    assert any(line.startswith("No predictions for mathverse_testmini: column(s) left empty (–)")
               for line in tab.footer)
    assert kinds.shown_benchmarks(VLM, ["micro-visual-test"]) == ["micro-visual-test"]  # no paper columns added
    assert kinds.shown_benchmarks(VLM, ["mathverse_testmini"]) == list(PAPER_VLM)
    assert kinds.shown_benchmarks("text", ["gsm8k"]) == ["gsm8k"]


def test_greedy_only_predictions_warn_when_the_metric_has_no_values(tmp_path: Path) -> None:
    root = tmp_path / "r"
    make_vlm_run(root, "ttrl-visual-single-s0", "ttrl", "visual-single", 0, {QV: FAMILIES[QV]},
                 {QV: {"mathvista_testmini": (0, 3)}}, with_samples=False)
    tab = build(root)
    assert any("add greedy to --metric" in w for w in tab.warnings)
    assert not any("add greedy" in w for w in build(root, metrics=("greedy",)).warnings)


# ---------------------------------------------------------------------------------------------------- the paper
def _md_cell(value: str, mark: str) -> str:
    return f"**{value}**" if mark == "b" else f"<u>{value}</u>" if mark == "u" else value


def _expected_md_rows(key: str) -> list[str]:
    """Every row of a paper table as its markdown line, built straight from the JSON."""
    label_key = "setting" if key == "ensVLM" else "method"
    raw = PAPER[key] if key == "ensVLM" else [r for block in PAPER[key] for r in block["rows"]]
    return ["| " + " | ".join([r[label_key]] + [_md_cell(v, m or "") for v, m in zip(r["vals"], r["marks"])]) + " |"
            for r in raw]


def test_reference_data_holds_the_vlm_tables_exactly_as_printed() -> None:
    blocks = reference.vlm_main()
    assert PAPER["benchVLM"] == ["MathVision", "MathVerse", "MathVista", "We-Math", "Avg"]
    expected = [(key, b["backbone"], b["dataset"], r["method"], tuple(r["vals"]), tuple(m or "" for m in r["marks"]))
                for key in VLM_KEYS for b in PAPER[key] for r in b["rows"]]
    got = [(b.table, b.backbone, b.dataset, r.label, r.printed, r.marks) for b in blocks for r in b.rows]
    assert got == expected and all(b.columns == tuple(PAPER["benchVLM"]) for b in blocks)
    assert [b.title for b in blocks][:2] == ["InternVL-3.5-2B, trained on open-r1 (small tier)",
                                             "InternVL-3.5-2B, trained on MMR1 (small tier)"]
    ens = reference.ens_vlm()
    assert [(b.dataset, r.label, r.printed) for b in ens for r in b.rows] == [
        (e["group"], e["setting"], tuple(e["vals"])) for e in PAPER["ensVLM"]]
    assert reference.vlm_backbones() == ("InternVL-3.5-2B", "Qwen2.5-VL-3B", "Qwen2.5-VL-7B", "InternVL-3.5-8B",
                                         "Gemma-3-12B")
    assert [b.dataset for b in reference.blocks_of("Qwen2.5-VL-3B")] == ["open-r1", "MMR1"]
    assert reference.backbone_for("qwen2vl-micro") is None and reference.backbone_for("llava-micro") is None
    assert reference.backbone_for("Qwen/Qwen2.5-VL-7B-Instruct") == "Qwen2.5-VL-7B"
    for block in blocks:  # the printed Avg is the mean of the four columns, to rounding
        for row in block.rows:
            assert sum(row.values[:4]) / 4 == pytest.approx(row.values[4], abs=0.006)


def test_reference_paper_shows_every_vlm_number_of_the_paper(visual: Path) -> None:
    tab = build(visual, reference="paper")
    assert tab.notes[0].startswith("--reference paper: nothing to compare, none of our backbones (llava-micro, "
                                   "qwen2vl-micro) is a paper backbone")
    assert "the paper's vision-language tables are shown on their own" in tab.notes[0]
    assert tab.notes[1].startswith("paper vision-language backbones: InternVL-3.5-2B, Qwen2.5-VL-3B")
    assert [b.table for b in tab.paper_blocks] == ["vlmSmall"] * 4 + ["vlmLarge"] * 3 + ["ensVLM"] * 2
    md = to_markdown(tab)
    lines = md.splitlines()
    for key in (*VLM_KEYS, "ensVLM"):
        for line in _expected_md_rows(key):
            assert line in lines, line
    assert "**Paper (Co-RL): vision-language table, small tier (vlmSmall), values as printed**" in lines
    assert "### Qwen2.5-VL-3B, trained on MMR1 (small tier)" in lines
    assert "### Gemma-3-12B, trained on open-r1 (large tier)" in lines
    assert "| Method | MathVision | MathVerse | MathVista | We-Math | Avg |" in lines
    sections = render_text(tab, "csv").split("\n\n")
    assert len(sections) == 4  # ours, vlmSmall, vlmLarge, ensVLM
    for key, section in zip(VLM_KEYS, sections[1:3]):
        rows = [r for r in csv.reader(io.StringIO(section)) if r and not r[0].startswith("#")]
        assert rows[0] == ["backbone", "dataset", "row", *PAPER["benchVLM"], "marks"]
        assert [r[:8] for r in rows[1:]] == [[b["backbone"], b["dataset"], r["method"], *r["vals"]]
                                             for b in PAPER[key] for r in b["rows"]]
    numbers = {v for key in (*VLM_KEYS, "ensVLM") for r in _rows(key) for v in r["vals"]}
    for fmt in ("latex", "html"):
        text = render_text(tab, fmt)
        assert all(n in text for n in numbers), fmt


def _rows(key: str) -> list[dict[str, Any]]:
    return PAPER[key] if key == "ensVLM" else [r for b in PAPER[key] for r in b["rows"]]


def test_backbone_picks_the_vlm_blocks_of_one_model_whatever_our_runs_are(visual: Path, tmp_path: Path) -> None:
    one = build(visual, backbone="Qwen2.5-VL-3B")
    assert [(b.backbone, b.dataset) for b in one.paper_blocks] == [("Qwen2.5-VL-3B", "open-r1"),
                                                                   ("Qwen2.5-VL-3B", "MMR1")]
    text = build(build_world(tmp_path / "t", only=["ttrl-single-s0"]), backbone="InternVL-3.5-8B")
    assert [b.backbone for b in text.paper_blocks] == ["InternVL-3.5-8B"]
    assert "the paper's InternVL-3.5-8B blocks are shown on their own" in text.notes[0]
    assert "| Co-RL (Different family) | **35.30** | <u>40.74</u> | **70.60** | <u>70.98</u> | **54.40** |" in \
        to_markdown(text)
    llm = build(visual, backbone="Qwen2.5-7B")  # a text backbone beside vision-language runs
    assert [b.backbone for b in llm.paper_blocks] == ["Qwen2.5-7B"]
    with pytest.raises(ValueError, match="unknown backbone 'Nope'; the paper's are: Qwen2.5-3B.*Gemma-3-12B"):
        build(visual, backbone="Nope")


def test_a_paper_vlm_backbone_gets_the_papers_rows_beside_ours(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(reference.BACKBONES, "fake-qwen-vl", "Qwen2.5-VL-3B")
    root = tmp_path / "r"
    every = {b: (6, 3) for b in PAPER_VLM}
    make_vlm_run(root, "corl-cross-family-s0", "corl", "cross-family", 0,
                 {"a0": "fake-qwen-vl", "a1": "llava-micro"}, {"a0": every, "a1": every},
                 {"a0": every, "a1": every}, profile="paper")
    make_vlm_run(root, "ttrl-single-s0", "ttrl", "single", 0, {"a0": "fake-qwen-vl"}, {"a0": every})
    tab = build(root, reference="paper", metrics=("greedy",))
    fake = next(b for b in tab.blocks if b.family == "fake-qwen-vl")
    assert fake.backbone == "Qwen2.5-VL-3B" and tab.paper_blocks == ()
    rows = {r.label: r for r in fake.rows}
    corl = label("corl", "cross-family")
    assert list(rows) == ["Base", "Base (paper)", "TTRL", "TTRL (paper)", corl, f"{corl} (paper)"]
    open_r1 = next(b for b in PAPER["vlmSmall"] if b["backbone"] == "Qwen2.5-VL-3B" and b["dataset"] == "open-r1")
    printed = {reference.our_label(r["method"]): [float(v) for v in r["vals"]] for r in open_r1["rows"]}
    for name in ("Base", "TTRL", corl):
        assert [pct(c) for c in rows[f"{name} (paper)"].cells] == printed[name]  # the four columns and Avg
    assert rows["TTRL (paper)"].delta == pytest.approx((printed["TTRL"][4] - printed["Base"][4]) / 100)
    assert tab.notes == ("--reference paper: rows marked (paper) hold the paper's printed values for Qwen2.5-VL-3B "
                         "(trained on open-r1) on MathVision, MathVerse, MathVista, We-Math (greedy columns only; not "
                         "ranked).",)
    assert any(line.startswith("paper (vision-language): greedy decoding") for line in tab.footer)
    sampled = build(root, reference="paper")
    assert "add greedy to --metric to compare" in sampled.notes[0] and len(sampled.paper_blocks) == 9


def test_table_reference_paper_without_runs_prints_the_papers_tables(tmp_path: Path) -> None:
    alone = paper_table()
    assert [b.table for b in alone.paper_blocks] == ["llmMain"] * 4 + ["vlmSmall"] * 4 + ["vlmLarge"] * 3 + \
        ["ensVLM"] * 2
    runner = CliRunner()
    res = runner.invoke(app, ["table", "-r", str(tmp_path / "none"), "--reference", "paper", "--format", "md"])
    assert res.exit_code == 0, res.output
    for key in VLM_KEYS:
        for line in _expected_md_rows(key):
            assert line in res.output.splitlines(), line
    assert "corl-bench results" not in res.output and "the paper's tables are shown on their own" in res.output
    out = tmp_path / "paper.csv"
    console = Console(file=io.StringIO(), width=200)
    assert main(tmp_path / "none", backbone="Gemma-3-12B", out=out, console=console) == []
    assert out.read_text(encoding="utf-8").startswith("backbone,dataset,row,MathVision,")
    assert "47.56" in out.read_text(encoding="utf-8") and "Gemma-3-12B" in console.file.getvalue()
    res = runner.invoke(app, ["table", "-r", str(tmp_path / "none")])
    assert res.exit_code == 0 and "start one with `corl-bench run`" in res.output


def test_cli_table_renders_micro_visual_runs_and_the_paper(visual: Path, tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["table", "-r", str(visual), "--reference", "paper", "--out",
                                   str(tmp_path / "t.md")])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "t.md").read_text(encoding="utf-8")
    assert "### qwen2vl-micro" in md and "### InternVL-3.5-8B, trained on open-r1 (large tier)" in md
    assert "vision-language" in res.output
