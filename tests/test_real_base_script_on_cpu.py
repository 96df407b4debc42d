"""``scripts/real_base.py`` (the real base table) without models: the Wilson interval, the committed GPQA rows without
their question text, the page from stored cells, and the seeded subsets (with the offline data copy)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import load_script

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"


@pytest.fixture()
def rb(tmp_path, monkeypatch):
    mod = load_script("real_base")
    monkeypatch.setattr(mod, "OUT", tmp_path / "real-base")
    monkeypatch.setattr(mod, "PAGE", tmp_path / "real-base.md")
    return mod


def test_wilson_interval(rb) -> None:
    lo, hi = rb.wilson(0, 40)
    assert lo == 0.0 and hi == pytest.approx(0.0876, abs=1e-4)
    lo, hi = rb.wilson(20, 40)
    assert (lo, hi) == (pytest.approx(0.3519, abs=1e-4), pytest.approx(0.6481, abs=1e-4))


def _cell(rb, model: str, prompt: str, bench: str, correct: list[bool]) -> None:
    work = rb.OUT / "work" / prompt / model / "eval" / "final" / model
    work.mkdir(parents=True, exist_ok=True)
    rows = [{"problem_id": f"p{i}", "decoding": "greedy", "sample_index": 0, "prompt": "QUESTION TEXT",
             "completion": "Answer: A", "extracted": "A", "gold": "A", "correct": c, "finished": True, "n_tokens": 3}
            for i, c in enumerate(correct)]
    (work / f"{bench}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (work / "eval_manifest.json").write_text("{}", encoding="utf-8")


def test_gpqa_rows_are_committed_without_the_question_and_the_page_reads_them(rb) -> None:
    _cell(rb, "smol", "native", "gpqa_diamond", [True, False, False, False])
    _cell(rb, "smol", "native", "gsm8k", [True, True])
    gpqa = rb._publish("smol", "native", "gpqa_diamond")
    assert "QUESTION TEXT" not in gpqa.read_text(encoding="utf-8")
    assert "QUESTION TEXT" in rb._publish("smol", "native", "gsm8k").read_text(encoding="utf-8")
    (rb.OUT / "items.json").write_text(json.dumps({b: [f"p{i}" for i in range(4 if b == "gpqa_diamond" else 2)]
                                                   for b in rb.BENCHMARKS}), encoding="utf-8")
    rec = {"commit": "abcdef1234567", "dirty": False, "seconds": 8.0, "load_seconds": 1.0, "n": 4, "cpu": "CPU x2",
           "loadavg_start": 1.0}
    rb._save_cells({"smol/native/gpqa_diamond": rec, "smol/native/gsm8k": dict(rec, n=2, seconds=2.0)})
    page = rb.report()
    row = next(line for line in page.splitlines() if line.startswith("| SmolLM2-135M-Instruct | native |"))
    assert "100.0 [34–100]" in row and "25.0 [5–70]" in row  # gsm8k 2/2, gpqa 1/4 with Wilson intervals
    assert "| smol/native/gpqa_diamond | 4 | 1 | 25.0 | 4.6–69.9 |" in page and "`abcdef1234`" in page


@pytest.mark.skipif(not (DATA / "gsm8k" / "test.jsonl").is_file(), reason="needs the offline data copy "
                    "../shared/data (see its README.md)")
def test_the_subsets_are_seeded_and_the_committed_ones_match(rb) -> None:
    first, again = rb.plan(str(DATA)), rb.plan(str(DATA))
    assert first == again and {b: len(v) for b, v in first.items()} == rb.SIZES
    committed = REPO / "results" / "real-base" / "items.json"
    assert json.loads(committed.read_text(encoding="utf-8")) == first
    for model, n in rb.ROW_SIZES.items():  # a smaller row: the first n of the same orders, nested in the full subsets
        capped = rb.plan(str(DATA), n)
        assert all(set(capped[b]) <= set(first[b]) and len(capped[b]) == min(n, rb.SIZES[b]) for b in first)
        assert json.loads((committed.parent / rb.items_path(model).name).read_text(encoding="utf-8")) == capped


def test_redo_takes_a_cell_out_keeps_its_old_score_and_the_page_lists_it(rb) -> None:
    _cell(rb, "smol", "native", "mbpp", [False, False])
    rb._publish("smol", "native", "mbpp")
    (rb.OUT / "items.json").write_text(json.dumps({b: ["p0", "p1"] for b in rb.BENCHMARKS}), encoding="utf-8")
    rb._save_cells({"smol/native/mbpp": {"commit": "0123456789ab", "seconds": 1.0, "n": 2, "cpu": "CPU x2",
                                         "loadavg_start": 1.0}})
    with pytest.raises(SystemExit, match="--reason"):
        rb.redo(["smol/native/mbpp"], " ")
    with pytest.raises(SystemExit, match="not a finished cell"):
        rb.redo(["smol/native/gsm8k"], "why")
    rb.redo(["smol/native/mbpp"], "prompt fixed")
    assert rb._cells() == {}  # --run evaluates it again
    assert not (rb.OUT / "work" / "native" / "smol" / "eval" / "final" / "smol" / "mbpp.jsonl").exists()
    page = rb.report()
    assert "* smol/native/mbpp: 0/2 at `0123456789`, superseded" in page and "prompt fixed" in page
