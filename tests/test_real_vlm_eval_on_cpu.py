"""``corl-bench eval`` scores a real Hugging Face VLM (issue 24, item 4): tiny random checkpoints of real architectures
(:mod:`corl_bench.models.tiny_vlm`) on local fixture copies of all four image benchmarks (MathVision, MathVerse's five
vision versions, MathVista, We-Math; a few PIL-drawn PNGs each), through the command line:

* each benchmark's predictions are stored, one greedy row per item, recording its images, and the prompt is the
  model's own chat template with its image placeholder in the user turn;
* a re-run generates nothing (the model is never asked again) and leaves the files as they were;
* ``corl-bench table`` re-grades the stored rows to the scores ``eval`` reported; We-Math's 4-D metrics come from
  the rows.

The random checkpoint's language model is rewired to answer ``\\boxed{B}`` to every prompt (:func:`answering`), so
the scores are known and differ between benchmarks. (``--engine vlmevalkit``: tests/test_vlmevalkit_bridge_on_cpu.py.)
"""

from __future__ import annotations

import csv
import io
import json
import re
import types
from pathlib import Path

import pytest
from typer.testing import CliRunner

from corl_bench.cli import app
from tests.test_mm_benchmarks_on_cpu import mathvision_dir, png, write_jsonl

BENCHES = ("mathvision_testmini", "mathverse_testmini", "mathvista_testmini", "wemath_testmini")
VERSIONS = ("Text Dominant", "Text Lite", "Vision Intensive", "Vision Dominant", "Vision Only")
ITEMS = {"mathvision_testmini": 3, "mathverse_testmini": 5, "mathvista_testmini": 2, "wemath_testmini": 3}
RIGHT = {"mathvision_testmini": 1, "mathverse_testmini": 3, "mathvista_testmini": 1, "wemath_testmini": 2}
"""items the model answering \\boxed{B} gets right (a B gold, or option B's value)"""


@pytest.fixture(autouse=True)
def isolated(monkeypatch, tmp_path):
    """No $CORL_BENCH_DATA from the environment; no hub."""
    monkeypatch.delenv("CORL_BENCH_DATA", raising=False)
    monkeypatch.setenv("CORL_BENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("COLUMNS", "400")  # the report lines unwrapped


def data_dir(root: Path) -> Path:
    """Local copies of the four image benchmarks in the shared schema (../shared/data/README.md)."""
    mathvision_dir(root)  # 3 items: free form, 5 letter options, 3 value options
    write_jsonl(root / "mathverse" / "testmini.jsonl", [
        {"id": f"mathverse_{i}", "problem": "Find x.\nChoices:\nA:1\nB:2" if i % 2 else "Find the area.",
         "answer": "B" if i % 2 else "12", "image": f"images/{i}.png", "choices": ["1", "2"] if i % 2 else None,
         "question_type": "multi_choice" if i % 2 else "free_form", "problem_index": "1", "problem_version": v}
        for i, v in enumerate(VERSIONS, 1)])
    write_jsonl(root / "mathvista" / "testmini.jsonl", [
        {"id": "mathvista_1", "problem": "Angle BOC?", "answer": "140°", "image": "images/1.jpg",
         "choices": ["135°", "140°", "145°", "150°"], "question_type": "multi_choice", "answer_type": "text"},
        {"id": "mathvista_2", "problem": "How many bars?", "answer": "4", "image": "images/2.jpg", "choices": None,
         "question_type": "free_form", "answer_type": "integer"}])
    write_jsonl(root / "wemath" / "testmini.jsonl", [  # one two-step problem: its two sub-problems and the composite
        {"id": f"wemath_2steps_1_{key}", "problem": q, "answer": gold, "image": f"images/2steps/{key}.png",
         "choices": ["300", "400", "No correct answer"], "choice_letters": "ABC", "question_type": "multi_choice",
         "we_math_id": "2steps_1", "key": key}
        for key, q, gold in (("2steps_1", "OA = ( ) m", "B"), ("2steps_2", "AB = ( ) m", "B"),
                             ("2steps_multi", "OA + AB = ( ) m", "C"))])
    for k in range(1, 6):
        png(root / "mathverse" / "images" / f"{k}.png", k)
    for k in (1, 2):
        png(root / "mathvista" / "images" / f"{k}.jpg", k)
    for k, key in enumerate(("2steps_1", "2steps_2", "2steps_multi")):
        png(root / "wemath" / "images" / "2steps" / f"{key}.png", k)
    return root


def answering(folder: Path, answer: str) -> Path:
    """Make the tiny checkpoint's language model answer every prompt with ``answer`` (greedy): its attention and MLP
    outputs zeroed, it is a bigram machine (the residual stream is the current token's embedding), and the
    embeddings of the generation prompt's last token and of ``answer``'s tokens (bytes) chain to each other and then
    to eos. The processor, chat template, vision tower and model class stay the real ones."""
    import torch

    from corl_bench.models.images import codec_of
    from corl_bench.models.load import load_model

    model, tok = load_model(str(folder))
    start = tok(codec_of(tok).chat("q", 1, "s"), add_special_tokens=False).input_ids[-1]
    chain = [start, *tok(answer, add_special_tokens=False).input_ids, tok.eos_token_id]
    assert len(set(chain)) == len(chain), "the chain needs distinct tokens"
    lm = model.model.language_model
    with torch.no_grad():
        for name, p in lm.named_parameters():
            if name.endswith(("o_proj.weight", "o_proj.bias", "down_proj.weight")):
                p.zero_()
        lm.norm.weight.fill_(1.0)
        emb = model.get_input_embeddings().weight
        if model.get_output_embeddings().weight is emb:  # Qwen2.5-VL-3B ties them; untie (as its 7B is)
            for cfg in (model.config, getattr(model.config, "text_config", None)):
                if cfg is not None:
                    cfg.tie_word_embeddings = False
            model.get_output_embeddings().weight = torch.nn.Parameter(torch.zeros_like(emb))
        head = model.get_output_embeddings().weight
        head.zero_()
        for i, (tid, nxt) in enumerate(zip(chain, chain[1:])):
            emb[tid] = 0.0
            emb[tid, i] = 1.0
            head[nxt, i] = 10.0
    model.save_pretrained(folder)
    return folder


def rows_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def cli(*args: str) -> str:
    res = CliRunner().invoke(app, list(args))
    assert res.exit_code == 0, res.output + repr(res.exception)
    return res.output


@pytest.mark.parametrize("arch", ["qwen2.5-vl", "internvl"])
def test_the_cli_scores_a_real_vlm_and_the_table_regrades_it_on_cpu(arch, tmp_path, monkeypatch):
    from corl_bench.eval.specs import get_spec
    from corl_bench.models.images import codec_of
    from corl_bench.models.load import load_model
    from corl_bench.models.tiny_vlm import build

    folder = answering(build(arch, tmp_path / "tiny", seed=0), "\\boxed{B}")
    data, out = data_dir(tmp_path / "data"), tmp_path / "out"
    args = ("eval", str(folder), "-b", ",".join(BENCHES), "--data-dir", str(data), "--out", str(out),
            "--max-new-tokens", "12", "--samples", "0", "--chunk", "8")
    said = cli(*args)

    agent_dir = out / "eval" / "final" / "tiny"
    codec = codec_of(load_model(str(folder))[1])
    reported = {}
    for bench in BENCHES:
        spec = get_spec(bench)
        rows = rows_of(agent_dir / f"{bench}.jsonl")
        assert len(rows) == ITEMS[bench] and len({r["problem_id"] for r in rows}) == ITEMS[bench]
        assert all(r["decoding"] == "greedy" and r["sample_index"] == 0 for r in rows)
        for r in rows:  # one image each, relative to the data dir; the model's template placed it in the user turn
            assert len(r["images"]) == 1 and (data / r["images"][0]).is_file()
            assert r["images"][0].startswith(spec.source.local.split("/")[0] + "/images/")
            assert codec.placeholder in r["prompt"] and r["prompt"].count(codec.placeholder) == 1
            assert spec.system in r["prompt"] and "within \\boxed{}." in r["prompt"]
            assert r["completion"] == "\\boxed{B}" and r["finished"] and r["extractor"] == "boxed"
        line = re.search(rf"tiny {re.escape(spec.key)}: n=.*", said).group(0)  # "... greedy=33.3 ..."
        reported[bench] = float(re.search(r"greedy=([\d.]+)", line).group(1))
        assert f"n={ITEMS[bench]} " in line and reported[bench] == round(100 * RIGHT[bench] / ITEMS[bench], 1)
        assert sum(r["correct"] for r in rows) == RIGHT[bench]
    assert {r["meta"]["key"] for r in rows_of(agent_dir / "wemath_testmini.jsonl")} == \
        {"2steps_1", "2steps_2", "2steps_multi"}
    assert re.search(r"tiny wemath_testmini@1: We-Math \(1 problems, greedy\).* IK 0.0 IG 100.0", said)  # subs right
    manifest = json.loads((agent_dir / "eval_manifest.json").read_text())
    assert set(manifest) == set(BENCHES) and all(m["decoding"]["max_new_tokens"] == 12 for m in manifest.values())

    # a re-run asks the model for nothing and leaves every file as it was
    before = {p.name: p.read_bytes() for p in agent_dir.iterdir()}
    import corl_bench.rollout as rollout

    def generate(prompts, params):
        raise AssertionError(f"a re-run asked the model for {len(prompts)} prompts again")

    monkeypatch.setattr(rollout, "make_engine", lambda *a, **k: types.SimpleNamespace(generate=generate))
    again = cli(*args)
    assert {p.name: p.read_bytes() for p in agent_dir.iterdir()} == before
    assert re.findall(r"tiny \S+: n=.*", again) == re.findall(r"tiny \S+: n=.*", said)

    # the table re-grades the stored completions to the same scores
    table = cli("table", "-r", str(out), "--metric", "greedy", "--format", "csv")
    got = next(csv.DictReader(io.StringIO(table)))
    assert got["method"] == "base" and got["runs"] == "out"
    for bench in BENCHES:
        assert float(got[f"{bench} greedy"]) == pytest.approx(100 * RIGHT[bench] / ITEMS[bench], abs=1e-3)
        assert round(float(got[f"{bench} greedy"]), 1) == reported[bench]
