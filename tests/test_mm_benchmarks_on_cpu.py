"""The multimodal benchmark specs (MathVision, MathVerse, MathVista, We-Math): validation, items with images and
options, requests with images, prediction rows that record them, the missing-image and missing-version errors, hub
rows converted with their embedded images, ``data prepare`` with images, and We-Math's four-dimensional metrics.

Fixtures are made here (tiny JSONL files and PIL-drawn PNGs in ``tmp_path``); the test marked ``shared_data`` counts
the items of ../shared/data and skips where it is absent."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from corl_bench.config import ConfigError
from corl_bench.eval.data import load_rows, prepare
from corl_bench.eval.evaluator import evaluate, request_for
from corl_bench.eval.items import build_items
from corl_bench.eval.specs import get_spec, parse_spec
from corl_bench.eval.wemath import four_dimensional, from_rows
from corl_bench.rollout.base import Completion
from corl_bench.rollout.request import Request
from tests.conftest import SHARED_DATA

pytestmark = pytest.mark.usefixtures("hub_answers")  # the hub's loaders are replaced by stand-ins here

MM = ("mathvision", "mathvision_testmini", "mathverse_testmini", "mathverse_testmini_text_only",
      "mathvista_testmini", "wemath_testmini")
PROMPT_TAIL = " Please reason step by step, and put your final answer within \\boxed{}."


@pytest.fixture(autouse=True)
def isolated(monkeypatch, tmp_path):
    """No $CORL_BENCH_DATA from the environment; hub images go to a fresh cache."""
    monkeypatch.delenv("CORL_BENCH_DATA", raising=False)
    monkeypatch.setenv("CORL_BENCH_CACHE", str(tmp_path / "cache"))


def png(path: Path, shade: int = 0) -> Path:
    from PIL import Image, ImageDraw

    path.parent.mkdir(parents=True, exist_ok=True)
    im = Image.new("RGB", (24, 16), (255, 255, 255))
    ImageDraw.Draw(im).rectangle((2, 2, 10 + shade, 12), fill=(shade * 20 % 255, 0, 0))
    im.save(path)
    return path


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def mathvision_dir(root: Path) -> Path:
    write_jsonl(root / "mathvision" / "testmini.jsonl", [
        {"id": "mathvision_4", "problem": "How many digits?\n<image1>", "answer": "6", "image": "images/4.jpg",
         "choices": None, "question_type": "free_form"},
        {"id": "mathvision_6", "problem": "Which picture?\n<image1>", "answer": "D", "image": "images/6.jpg",
         "choices": ["A", "B", "C", "D", "E"], "question_type": "multi_choice"},
        {"id": "mathvision_9", "problem": "Angle?\n<image1>", "answer": "B", "image": "images/9.jpg",
         "choices": ["30°", "45°", "60°"], "question_type": "multi_choice"}])
    for k, name in enumerate(("4.jpg", "6.jpg", "9.jpg")):
        png(root / "mathvision" / "images" / name, k)
    return root


def fake_generate(answers: dict[str, str]):
    """A generate callable answering each prompt with ``\\boxed{<answer>}`` chosen by a word of the prompt."""
    seen = []

    def generate(prompts, params):
        seen.extend(prompts)
        outs = []
        for p in prompts:
            text = p.text if isinstance(p, Request) else p
            reply = next((a for key, a in answers.items() if key in text), "0")
            outs.append([Completion((1, 2, 3), (), f"... so \\boxed{{{reply}}}", True)] * params.n)
        return outs

    return generate, seen


# ------------------------------------------------------------------------------------------------ specs
def test_the_multimodal_specs_validate_with_the_papers_protocol():
    for name in MM:
        spec = get_spec(name)
        assert spec.decoding.greedy and spec.decoding.samples == 0 and spec.decoding.max_new_tokens == 16384
        assert spec.extractor == "boxed" and spec.grader == "mc_letter_or_value" and spec.chat_template
        assert spec.system == "You are a helpful assistant." and spec.prompt == "{problem}" + PROMPT_TAIL.replace(
            "{}", "{{}}")
        assert spec.modality == ("text" if name == "mathverse_testmini_text_only" else "image")
    assert get_spec("mathverse_testmini").source.versions == ("Text Dominant", "Text Lite", "Vision Intensive",
                                                             "Vision Dominant", "Vision Only")
    assert get_spec("wemath_testmini").record_fields == ("we_math_id", "key")
    assert "we-math" in get_spec("wemath_testmini").metrics


def base_spec(**over):
    raw = {"name": "mm", "version": "1", "task": "math", "modality": "image",
           "source": {"local": "mathvision/testmini.jsonl"}, "prompt": "{problem}" + PROMPT_TAIL.replace("{}", "{{}}"),
           "extractor": "boxed", "grader": "mc_letter_or_value", "choices_template": "\n{options}",
           "decoding": {"greedy": True, "samples": 0, "max_new_tokens": 8}}
    raw.update(over)
    return raw


@pytest.mark.parametrize("over, match", [
    ({"modality": "video"}, "modality must be one of text, image"),
    ({"source": {"hub": {"path": "x/y"}}}, "source.local is required for modality: image"),
    ({"choices_template": "no placeholder"}, "choices_template must be a string containing {options}"),
    ({"record_fields": "we_math_id"}, "record_fields must be a list"),
    ({"metrics": ["greedy", "we-math"]}, r"add record_fields: \[we_math_id, key\]"),
    ({"source": {"local": "a.jsonl", "versions": "Text Only"}}, "source.versions must be a list"),
    ({"extractor": "answer-tagg"}, "extractor: unknown answer extractor 'answer-tagg'; did you mean 'answer_tag'"),
])
def test_bad_multimodal_fields_fail_with_one_line(over, match):
    with pytest.raises(ConfigError, match=match) as e:
        parse_spec(base_spec(**over), origin="benchmarks/mm.yaml")
    assert "\n" not in str(e.value)


# ------------------------------------------------------------------------------------------------ items & requests
def test_items_carry_absolute_images_options_and_a_letter_gold(tmp_path):
    root = mathvision_dir(tmp_path / "data")
    spec = parse_spec(base_spec())
    items = build_items(spec, load_rows(spec, root))
    assert [it.id for it in items] == ["mathvision_4", "mathvision_6", "mathvision_9"]
    free, pics, angle = items
    assert free.images == (str((root / "mathvision/images/4.jpg").resolve()),) and Path(free.images[0]).is_absolute()
    assert free.meta["images"] == ["mathvision/images/4.jpg"] and free.choices == ()
    assert free.problem == "How many digits?\n<image1>"              # <image1> kept; no options for free form
    assert angle.choices == ("30°", "45°", "60°") and angle.gold == "B"
    assert angle.problem == "Angle?\n<image1>\n(A) 30°\n(B) 45°\n(C) 60°"
    assert pics.problem.endswith("\n(A) A\n(B) B\n(C) C\n(D) D\n(E) E")


def test_request_for_attaches_the_images_and_keeps_text_items_plain(tmp_path):
    root = mathvision_dir(tmp_path / "data")
    spec = parse_spec(base_spec())
    item = build_items(spec, load_rows(spec, root))[2]
    req = request_for(spec, item)
    assert isinstance(req, Request) and req.images == item.images
    assert req.text == item.problem + PROMPT_TAIL and "<image>" not in req.text and "<|image" not in req.text
    text_spec = get_spec("math500")
    from corl_bench.eval.items import Item

    assert request_for(text_spec, Item("t", "1+1?", "2")) == "1+1?\nPlease reason step by step, and put your " \
                                                              "final answer within \\boxed{}."


def test_evaluate_records_images_choices_and_grades_letter_or_value(tmp_path):
    root = mathvision_dir(tmp_path / "data")
    spec = parse_spec(base_spec())
    items = build_items(spec, load_rows(spec, root))
    generate, seen = fake_generate({"digits": "6", "picture": "C", "Angle": "45"})
    scores = evaluate(generate, spec, items, out_path=tmp_path / "out" / "mm.jsonl")
    assert all(isinstance(p, Request) and len(p.images) == 1 for p in seen)
    rows = [json.loads(x) for x in (tmp_path / "out" / "mm.jsonl").read_text().splitlines()]
    assert [r["correct"] for r in rows] == [True, False, True]        # 6 right, C for D wrong, 45 = option B
    assert scores.greedy == pytest.approx(2 / 3) and scores.avg_k is None
    assert rows[0]["images"] == ["mathvision/images/4.jpg"] and "choices" not in rows[0]
    assert rows[2]["choices"] == ["30°", "45°", "60°"] and rows[2]["extractor"] == "boxed"
    assert rows[2]["prompt"] == items[2].problem + PROMPT_TAIL        # the text, no image tokens


def test_a_tiny_vlm_answers_image_items_through_the_hf_engine(tmp_path):
    """The real path: request_for's Request(text, images=file paths) through the hf engine of a tiny untrained VLM
    (the micro visual world's qwen2-vl layout); greedy decoding is deterministic, so a re-run equals the first."""
    from corl_bench.rollout import make_engine
    from tests.test_vlm_on_cpu import build_tiny_vlm

    model, tok = build_tiny_vlm("qwen2vl-micro")
    root = mathvision_dir(tmp_path / "data")
    spec = parse_spec(base_spec())
    items = build_items(spec, load_rows(spec, root))
    generate = make_engine("hf", model, tok).generate
    scores = evaluate(generate, spec, items, out_path=tmp_path / "a.jsonl")
    again = evaluate(generate, spec, items, out_path=tmp_path / "b.jsonl")
    rows = [json.loads(x) for x in (tmp_path / "a.jsonl").read_text().splitlines()]
    assert scores.n_problems == 3 and again == scores and len(rows) == 3
    assert [r["images"] for r in rows] == [["mathvision/images/4.jpg"], ["mathvision/images/6.jpg"],
                                           ["mathvision/images/9.jpg"]]
    assert [r["completion"] for r in rows] == [json.loads(x)["completion"]
                                               for x in (tmp_path / "b.jsonl").read_text().splitlines()]


def test_a_local_copy_without_its_images_fails_in_one_line_naming_where_they_go(tmp_path):
    root = tmp_path / "data"
    write_jsonl(root / "mathvista" / "testmini.jsonl", [
        {"id": f"mathvista_{i}", "problem": "q", "answer": "1", "image": f"images/{i}.jpg", "choices": None,
         "question_type": "free_form", "image_available": False} for i in (1, 2, 3)])
    spec = get_spec("mathvista_testmini")
    with pytest.raises(ConfigError) as e:
        load_rows(spec, root)
    msg = str(e.value)
    assert "\n" not in msg and "3 of 3 images are missing" in msg
    assert "<data-dir>/mathvista/images/<pid>.jpg" in msg and "AI4Math/MathVista" in msg and "split testmini" in msg


def test_mathvista_option_texts_become_letters(tmp_path):
    root = tmp_path / "data"
    write_jsonl(root / "mathvista" / "testmini.jsonl", [
        {"id": "mathvista_1", "problem": "Angle BOC?", "answer": "145°", "image": "images/1.jpg",
         "choices": ["135°", "140°", "145°", "150°"], "question_type": "multi_choice"}])
    png(root / "mathvista" / "images" / "1.jpg")
    item = build_items(get_spec("mathvista_testmini"), load_rows(get_spec("mathvista_testmini"), root))[0]
    assert item.gold == "C" and item.problem == "Angle BOC?\nChoices:\n(A) 135°\n(B) 140°\n(C) 145°\n(D) 150°"


# ------------------------------------------------------------------------------------------------ MathVerse versions
def mathverse_rows(versions, with_image=False):
    return [{"id": f"mathverse_{i}", "problem": "Find x.\nChoices:\nA:1\nB:2", "answer": "B", "image": None,
             "choices": ["1", "2"], "question_type": "multi_choice", "problem_version": v, "problem_index": "1"}
            for i, v in enumerate(versions, 1)]


def test_mathverse_text_only_offline_and_the_vision_versions_need_the_hub(tmp_path, monkeypatch):
    root = tmp_path / "data"
    write_jsonl(root / "mathverse" / "testmini_text_only.jsonl", mathverse_rows(["Text Only"] * 3))
    text = get_spec("mathverse_testmini_text_only")
    items = build_items(text, load_rows(text, root))
    assert len(items) == 3 and items[0].images == () and items[0].choices == ("1", "2")
    assert items[0].problem == "Find x.\nChoices:\nA:1\nB:2"          # options already in the text: not repeated
    assert request_for(text, items[0]) == items[0].problem + PROMPT_TAIL   # no image: a plain str

    datasets = pytest.importorskip("datasets")

    def offline(path, *a, **kw):
        raise ConnectionError(f"Couldn't reach '{path}' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(ConfigError) as e:
        load_rows(get_spec("mathverse_testmini"), root)
    msg = str(e.value)
    assert "\n" not in msg and "AI4Math/MathVerse (config testmini)" in msg and "Vision Only" in msg

    # a local file that lacks a requested version: one line naming the hub dataset that has it
    write_jsonl(root / "mathverse" / "testmini.jsonl", mathverse_rows(["Text Lite", "Vision Only"]))
    with pytest.raises(ConfigError) as e:
        load_rows(get_spec("mathverse_testmini"), root)
    msg = str(e.value)
    assert "\n" not in msg and "version(s) Text Dominant, Vision Intensive, Vision Dominant are not in" in msg
    assert "AI4Math/MathVerse (config testmini)" in msg


# ------------------------------------------------------------------------------------------------ hub rows
def test_hub_rows_are_converted_and_their_images_written_once(tmp_path, monkeypatch):
    datasets = pytest.importorskip("datasets")
    from PIL import Image

    img = Image.new("RGB", (8, 8), (0, 128, 0))
    records = {
        "MathLLMs/MathVision": [{"id": "7", "question": "Count.\n<image1>", "options": [], "image": "images/7.jpg",
                                 "decoded_image": img, "answer": "$\\boxed{3}$", "solution": None, "level": 1,
                                 "subject": "counting"}],
        "AI4Math/MathVista": [{"pid": "5", "question": "Which?", "image": "images/5.jpg", "decoded_image": img,
                               "choices": ["red", "green"], "unit": None, "precision": None, "answer": "green",
                               "question_type": "multi_choice", "answer_type": "text", "metadata": {}, "query": "q"}],
        "We-Math/We-Math": [{"ID": "2steps_1", "key": "2steps_multi", "question": "OA = ?", "answer": "B",
                             "option": "A. 300;B. 400; C. No correct answer", "image_path": img,
                             "knowledge concept": "Length", "question number": 1}],
        "AI4Math/MathVerse": [{"sample_index": 9, "problem_index": 2, "problem_version": "Vision Only",
                               "question": "Find y.\nChoices:\nA:1\nB:2", "image": img, "answer": "A",
                               "question_type": "multi-choice", "metadata": {}, "query_wo": "", "query_cot": ""}],
    }
    monkeypatch.setattr(datasets, "load_dataset", lambda path, **kw: records[path])
    vision = build_items(get_spec("mathvision"), load_rows(get_spec("mathvision"), None))[0]
    assert vision.id == "mathvision_7" and vision.gold == "3" and vision.choices == ()
    cached = tmp_path / "cache" / "hub-data" / "mathvision" / "images" / "mathvision_7.png"
    assert vision.images == (str(cached.resolve()),) and vision.meta["images"] == ["mathvision/images/mathvision_7.png"]
    vista = build_items(get_spec("mathvista_testmini"), load_rows(get_spec("mathvista_testmini"), None))[0]
    assert vista.gold == "B" and vista.choices == ("red", "green") and Path(vista.images[0]).is_file()
    we = build_items(get_spec("wemath_testmini"), load_rows(get_spec("wemath_testmini"), None))[0]
    assert we.id == "wemath_2steps_1_2steps_multi" and we.choices == ("300", "400", "No correct answer")
    assert we.meta["record"] == {"we_math_id": "2steps_1", "key": "2steps_multi"}
    full = get_spec("mathverse_testmini")  # one version in the fixture: a spec variant asks for just that one
    one = dataclasses.replace(full, source=dataclasses.replace(full.source, versions=("Vision Only",)))
    verse = build_items(one, load_rows(one, None))[0]
    assert verse.id == "mathverse_9" and verse.choices == ("1", "2") and verse.gold == "A" and len(verse.images) == 1
    mtime = cached.stat().st_mtime_ns
    load_rows(get_spec("mathvision"), None)
    assert cached.stat().st_mtime_ns == mtime                         # written once


def test_prepare_freezes_rows_with_their_images(tmp_path):
    root = mathvision_dir(tmp_path / "data")
    spec = get_spec("mathvision_testmini")
    dest = tmp_path / "frozen"
    manifest = prepare([spec], dest, root)
    assert manifest["benchmarks"]["mathvision_testmini"]["rows"] == 3
    rows = [json.loads(x) for x in (dest / "mathvision" / "testmini.jsonl").read_text().splitlines()]
    assert all(not any(k.startswith("_") for k in r) for r in rows)
    assert (dest / "mathvision" / "images" / "9.jpg").read_bytes() == (root / "mathvision/images/9.jpg").read_bytes()
    again = build_items(spec, load_rows(spec, dest))
    assert [it.gold for it in again] == ["6", "D", "B"] and all(Path(p).is_file() for it in again for p in it.images)


# ------------------------------------------------------------------------------------------------ We-Math metrics
def wemath_correct() -> dict[tuple[str, str], bool]:
    """Seven composite problems, hand-classified (sub = the one-step answers, multi = the composite):

    p1 2-step  sub T T  multi T   -> CM strict, CM loose
    p2 2-step  sub T F  multi T   -> RM strict, CM loose
    p3 2-step  sub F F  multi T   -> RM strict, RM loose
    p4 2-step  sub T T  multi F   -> IG
    p5 2-step  sub F T  multi F   -> IK
    p6 3-step  sub T T T multi T  -> CM strict, CM loose
    p7 3-step  sub F F F multi F  -> IK
    p8 2-step  sub T (no 2steps_2 row) multi T -> incomplete, left out
    """
    table = {"p1": ("2steps", [1, 1], 1), "p2": ("2steps", [1, 0], 1), "p3": ("2steps", [0, 0], 1),
             "p4": ("2steps", [1, 1], 0), "p5": ("2steps", [0, 1], 0), "p6": ("3steps", [1, 1, 1], 1),
             "p7": ("3steps", [0, 0, 0], 0)}
    out = {}
    for pid, (kind, subs, multi) in table.items():
        for i, ok in enumerate(subs, 1):
            out[(pid, f"{kind}_{i}")] = bool(ok)
        out[(pid, f"{kind}_multi")] = bool(multi)
    out[("p8", "2steps_1")] = True
    out[("p8", "2steps_multi")] = True
    return out


def test_wemath_four_dimensional_metrics_by_hand():
    m = four_dimensional(wemath_correct())
    assert m["problems"] == 7 and m["incomplete"] == 1
    assert m["counts"] == {"IK": 2, "IG": 1, "CM_strict": 2, "CM_loose": 3, "RM_strict": 2, "RM_loose": 1}
    assert m["IK"] == pytest.approx(2 / 7) and m["IG"] == pytest.approx(1 / 7)
    assert m["CM_strict"] == pytest.approx(2 / 7) and m["CM_loose"] == pytest.approx(3 / 7)
    assert m["RM_strict"] == pytest.approx(2 / 4) and m["RM_loose"] == pytest.approx(1 / 4)  # RM / (CM + RM)
    assert m["score_strict"] == pytest.approx((7 - 0.5 * 1 - 2 - 2) / 7)                    # 2.5 / 7
    assert m["score_loose"] == pytest.approx((7 - 0.5 * 1 - 1 - 2) / 7)                     # 3.5 / 7


def test_wemath_metrics_from_prediction_rows_use_the_greedy_rows_and_a_grader():
    rows = []
    for (wid, key), ok in wemath_correct().items():
        base = {"problem_id": f"{wid}_{key}", "gold": "A", "meta": {"we_math_id": wid, "key": key}}
        rows.append({**base, "decoding": "greedy", "sample_index": 0, "correct": ok,
                     "completion": "\\boxed{A}" if ok else "\\boxed{B}"})
        rows.append({**base, "decoding": "sampled", "sample_index": 0, "correct": not ok, "completion": "x"})
    stored = from_rows(rows)
    assert stored["decoding"] == "greedy" and stored["counts"]["IK"] == 2 and stored["counts"]["CM_loose"] == 3
    spec = get_spec("wemath_testmini")
    from corl_bench.eval.evaluator import row_grader

    assert from_rows(rows, row_grader(spec))["counts"] == stored["counts"]   # re-graded = stored
    flipped = from_rows(rows, decoding="sampled")["counts"]  # every answer flipped: p1 p2 p6 IK, p3 IG, p4 RM ...
    assert flipped == {"IK": 3, "IG": 1, "CM_strict": 1, "CM_loose": 2, "RM_strict": 2, "RM_loose": 1}
    with pytest.raises(ValueError, match="record_fields"):
        from_rows([{"decoding": "greedy", "problem_id": "x", "correct": True}])


# ------------------------------------------------------------------------------------------------ shared data
@pytest.mark.shared_data
@pytest.mark.parametrize("name, count, with_images", [("mathvision", 3040, 3040), ("mathvision_testmini", 304, 304),
                                                      ("mathverse_testmini_text_only", 788, 0),
                                                      ("wemath_testmini", 1740, 1740)])
def test_shared_data_multimodal_counts(name, count, with_images):
    if not SHARED_DATA.is_dir():
        pytest.skip(f"{SHARED_DATA} is absent (offline benchmark copies live there on the project machines)")
    spec = get_spec(name)
    items = build_items(spec, load_rows(spec, SHARED_DATA))
    assert len(items) == count and sum(bool(it.images) for it in items) == with_images
    assert all(it.gold for it in items)
    if name == "wemath_testmini":
        assert len({it.meta["record"]["we_math_id"] for it in items}) == 525


@pytest.mark.shared_data
def test_shared_mathvista_has_no_images_and_says_where_they_go():
    if not SHARED_DATA.is_dir():
        pytest.skip(f"{SHARED_DATA} is absent (offline benchmark copies live there on the project machines)")
    if (SHARED_DATA / "mathvista" / "images" / "1.jpg").is_file():
        pytest.skip("the MathVista images were added to the shared data")
    with pytest.raises(ConfigError) as e:
        load_rows(get_spec("mathvista_testmini"), SHARED_DATA)
    assert "\n" not in str(e.value) and "1000 of 1000 images are missing" in str(e.value)
    assert "<data-dir>/mathvista/images/<pid>.jpg" in str(e.value)


# ------------------------------------------------------------------------------------------------ corl-bench eval
@pytest.mark.parametrize("benchmarks, kw, match", [
    (["gsm8k"], {"extractor": "answer_tag"}, "--extractor applies to image benchmarks only"),
    (["mathvision"], {"extractor": "nope"}, "--extractor 'nope' is unknown"),
    (["mathvision"], {"engine": "lm-eval"}, "the lm-eval bridge renders text prompts only"),
])
def test_eval_options_for_image_benchmarks_fail_before_anything_loads(benchmarks, kw, match, monkeypatch):
    from corl_bench.eval import data, targets

    monkeypatch.setattr(data, "load_rows", lambda *a, **k: pytest.fail("data loaded before the options were checked"))
    with pytest.raises(ConfigError, match=match) as e:
        targets.run_eval("smol", benchmarks, **kw)
    assert "\n" not in str(e.value)
