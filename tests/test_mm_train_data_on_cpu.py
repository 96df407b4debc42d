"""Multimodal training sets through the hf profile's data layer: multimodal-open-r1-8k-verified, MMR1 and
Geometry3K, from a local folder (JSONL + PIL-drawn PNGs made here) or the hub (``datasets.load_dataset`` replaced
by in-memory rows with PIL images); problems carry their images, the profile's ``render`` attaches them to the
request, and text problems render exactly as before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corl_bench.config import ConfigError
from corl_bench.hf import data as hfdata
from corl_bench.hf.profile import HFProfile
from corl_bench.rollout.request import Request

pytestmark = pytest.mark.usefixtures("hub_answers")  # the hub's loaders are replaced by stand-ins here

SETS = {"multimodal-open-r1-8k-verified": "multimodal_open_r1", "mmr1": "mmr1", "geometry3k": "geometry3k"}


@pytest.fixture(autouse=True)
def no_env(monkeypatch):
    monkeypatch.delenv("CORL_BENCH_DATA", raising=False)


def png(path: Path, shade: int = 0) -> None:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (12, 12), (shade, 60, 90)).save(path)


def local_set(root: Path, folder: str) -> Path:
    rows = [{"id": f"{folder}-0", "problem": "<image>Find x in the triangle.", "answer": "5",
             "image": "images/0.png", "choices": None},
            {"id": f"{folder}-1", "problem": "Which angle is largest?", "answer": "B", "image": "images/1.png",
             "choices": ["A1", "A2", "A3"]},
            {"id": f"{folder}-2", "problem": "Two views.", "answer": "2", "images": ["images/2a.png", "images/2b.png"]}]
    for name, shade in (("0.png", 0), ("1.png", 40), ("2a.png", 80), ("2b.png", 120)):
        png(root / folder / "images" / name, shade)
    hfdata.write_jsonl(root / folder / "train.jsonl", rows)
    return root


def test_the_multimodal_sets_are_named_sources():
    for name, folder in SETS.items():
        src = hfdata.parse_source(name)
        assert src.kind == "named" and src.named.local == f"{folder}/train.jsonl" and src.named.images_field
    assert hfdata.NAMED["multimodal-open-r1-8k-verified"].hub["path"] == "lmms-lab/multimodal-open-r1-8k-verified"
    assert hfdata.NAMED["mmr1"].hub["path"] == "MMR1/MMR1-Math-RL-Data-v0"
    assert hfdata.NAMED["geometry3k"].hub == {"path": "hiyouga/geometry3k", "split": "train"}


@pytest.mark.parametrize("name", sorted(SETS))
def test_a_local_folder_gives_problems_with_absolute_image_paths(name, tmp_path):
    root = local_set(tmp_path / "data", SETS[name])
    ts = hfdata.TrainingSet.load(name, root)
    p0, p1, p2 = ts.problems
    folder = (root / SETS[name] / "images").resolve()
    assert p0.images == (str(folder / "0.png"),) and p0.problem == "Find x in the triangle."  # <image> removed
    assert p1.problem == "Which angle is largest?\nChoices:\n(A) A1\n(B) A2\n(C) A3" and p1.answer == "B"
    assert p2.images == (str(folder / "2a.png"), str(folder / "2b.png"))
    assert all(Path(f).is_file() for p in ts.problems for f in p.images)


def test_missing_images_and_a_missing_set_are_one_line_errors(tmp_path, monkeypatch):
    root = local_set(tmp_path / "data", "geometry3k")
    (root / "geometry3k" / "images" / "1.png").unlink()
    with pytest.raises(ConfigError) as e:
        hfdata.TrainingSet.load("geometry3k", root)
    assert "\n" not in str(e.value) and "1 of 4 images are missing" in str(e.value)

    datasets = pytest.importorskip("datasets")

    def offline(path, **kw):
        raise ConnectionError(f"Couldn't reach '{path}' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(ConfigError) as e:
        hfdata.TrainingSet.load("mmr1", tmp_path / "empty")
    msg = str(e.value)
    assert "\n" not in msg and "data.train=mmr1: could not load it from the hub" in msg
    assert "DIR/mmr1/train.jsonl and its images" in msg
    monkeypatch.setattr(hfdata, "_datasets_installed", lambda: False)
    with pytest.raises(ConfigError) as e:
        hfdata.check_source("multimodal-open-r1-8k-verified", tmp_path / "empty")
    assert "\n" not in str(e.value) and "DIR/multimodal_open_r1/train.jsonl and its images" in str(e.value)


def test_hub_rows_keep_their_embedded_images_and_open_r1_answers_come_from_the_answer_tag(monkeypatch):
    datasets = pytest.importorskip("datasets")
    from PIL import Image

    a, b = Image.new("RGB", (4, 4), "red"), Image.new("RGB", (4, 4), "blue")
    hub = {"lmms-lab/multimodal-open-r1-8k-verified": [
        {"image": a, "problem": "How many red squares?", "solution": "<think>one</think><answer> 1 </answer>",
         "original_question": "q", "original_answer": "1"}],
        "MMR1/MMR1-Math-RL-Data-v0": [{"images": [a, b], "problem": "<image><image>Compare.", "answer": "3"}],
        "hiyouga/geometry3k": [{"images": [b], "problem": "<image>Find y.", "answer": "12", "id": 7,
                                "choices": ["10", "12"], "ground_truth": "B"}]}
    monkeypatch.setattr(datasets, "load_dataset", lambda path, **kw: hub[path])
    r1 = hfdata.TrainingSet.load("multimodal-open-r1-8k-verified", None).problems[0]
    assert r1.answer == "1" and r1.images == (a,) and r1.problem == "How many red squares?"
    mmr1 = hfdata.TrainingSet.load("mmr1", None).problems[0]
    assert mmr1.images == (a, b) and mmr1.problem == "Compare." and mmr1.answer == "3"
    geo = hfdata.TrainingSet.load("geometry3k", None).problems[0]
    assert geo.images == (b,) and geo.problem == "Find y." and geo.answer == "12"  # a value answer: no options added


def test_render_attaches_the_images_and_text_problems_are_unchanged(tmp_path):
    root = local_set(tmp_path / "data", "mmr1")
    profile = HFProfile()
    p0 = hfdata.TrainingSet.load("mmr1", root).problems[0]
    req = profile.render(p0, "original")
    assert req == Request(text=f"Find x in the triangle.\n {hfdata.INSTRUCTION}", images=p0.images)
    assert profile.render(p0, "original", prompt="bare").images == p0.images
    assert profile.render(p0, "original", prompt="fewshot").images == p0.images
    text = hfdata.build_problems([{"id": "t", "problem": "What is 2+2?", "answer": "4"}], "t")[0]
    assert text.images == ()
    assert profile.render(text, "original") == Request(text=f"What is 2+2?\n {hfdata.INSTRUCTION}")
    assert profile.render(text, "original").images == ()
    assert json.loads(json.dumps({"text": profile.render(text, "original").text}))["text"].endswith("\\boxed{}.")


def test_the_r1v_prompt_asks_the_papers_vlm_turn_and_its_answer_tag_is_read(tmp_path):
    """A cohort agent's ``prompt: r1v`` asks a multimodal problem as the paper's VLM training turn (R1-V: the problem,
    a space, the <think>/<answer> instruction; no boxed instruction), as the user turn of the model's own chat
    template with the image placed by it; ``rollout.extractor=answer_tag`` reads the answer of such a completion."""
    from corl_bench.config import AgentSpec, load_config
    from corl_bench.models.tiny_vlm import build
    from corl_bench.profile import render_for
    from corl_bench.registries import EXTRACTORS

    root = local_set(tmp_path / "data", "mmr1")
    p0 = hfdata.TrainingSet.load("mmr1", root).problems[0]
    r1v = f"Find x in the triangle. {hfdata.ANSWER_TAG_INSTRUCTION}"
    assert hfdata.ANSWER_TAG_INSTRUCTION == ("Output the thinking process in <think> </think> and final answer in "
                                             "<answer> </answer> tags.")
    profile = HFProfile()
    assert profile.render(p0, "original", prompt="r1v") == Request(text=r1v, images=p0.images)
    folder = build("qwen2.5-vl", tmp_path / "qwen2.5-vl", seed=0)
    HFProfile.check_agent(AgentSpec("a0", str(folder), prompt="r1v"))  # a valid prompt format
    profile.load(str(folder), "cpu")  # as in a run: the loaded tokenizer carries the model's processor
    req = render_for(profile, p0, AgentSpec("a0", str(folder), prompt="r1v"))
    assert req.images == p0.images and hfdata.INSTRUCTION not in req.text
    user = req.text[req.text.index("<|im_start|>user\n"):]  # the user turn of the model's own chat template
    assert user.index("<|vision_start|>") < user.index(f"{r1v}<|im_end|>")  # the image, then the R1-V text
    assert req.text.endswith("<|im_start|>assistant\n")
    cfg = load_config(None, ["model.profile=hf", "rollout.extractor=answer_tag", "data.train=mmr1"])
    read = EXTRACTORS.get(cfg.rollout.extractor)
    assert read("<think>x = 5 since ...</think> <answer> 5 </answer>") == "5"
    assert read("so x = \\boxed{5}") is None  # no <answer> tag: no answer (the paper's verifier has no fallback)
