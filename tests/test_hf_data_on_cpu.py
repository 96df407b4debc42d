"""Real training data for the hf profile, on made-up fixtures (tests/fixtures/hf): named sets, JSONL paths and hub
sources, seeded resumable epochs, the contamination check, and the cached rephrased view. One test reads the real
sets in ../shared/data (marker ``shared_data``; skipped where they are absent)."""

from __future__ import annotations

import json
from itertools import islice
from pathlib import Path

import pytest

from corl_bench.config import ConfigError, load_config
from corl_bench.eval.items import Item
from corl_bench.hf import data as hfdata
from tests.conftest import SHARED_DATA

pytestmark = pytest.mark.usefixtures("hub_answers")  # the hub's loaders are replaced by stand-ins here

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hf"


def one_line(e: BaseException) -> str:
    text = str(e)
    assert text and "\n" not in text, text
    return text


def _bench_items() -> list[Item]:
    rows = [json.loads(x) for x in (FIXTURES / "gsm8k" / "test.jsonl").read_text().split("\n") if x.strip()]
    return [Item(r["id"], r["problem"], r["answer"]) for r in rows]


# ------------------------------------------------------------------------------------------------ sources
def test_sources_parse_without_io_and_bad_names_are_one_line_errors():
    assert hfdata.parse_source("").name == "math-level345"  # the profile's default: the paper's set
    assert hfdata.parse_source("gsm8k-train").named.local == "gsm8k/train.jsonl"
    assert hfdata.parse_source("hub:acme/math:test").hub == {"path": "acme/math", "split": "test"}
    assert hfdata.parse_source("hub:acme/math").hub["split"] == "train"
    assert hfdata.parse_source("my/problems.jsonl").kind == "jsonl"
    for bad in ("math-level-345", "hub:nope", "hub:/x"):
        with pytest.raises(ConfigError) as e:
            hfdata.parse_source(bad)
        assert "data.train" in one_line(e.value)
    with pytest.raises(ConfigError) as e:
        load_config(None, ["data.train=' padded'"])
    assert "data.train" in one_line(e.value)


def test_named_sets_come_from_the_data_dir_and_env(monkeypatch):
    monkeypatch.delenv("CORL_BENCH_DATA", raising=False)
    ts = hfdata.TrainingSet.load("gsm8k-train", FIXTURES)
    assert len(ts.problems) == 10 and ts.problems[0].id == "g0" and ts.problems[0].answer == "7"
    monkeypatch.setenv("CORL_BENCH_DATA", str(FIXTURES))
    assert len(hfdata.TrainingSet.load("gsm8k-train").problems) == 10


def test_a_missing_set_names_the_fix(monkeypatch, tmp_path):
    monkeypatch.delenv("CORL_BENCH_DATA", raising=False)
    monkeypatch.setattr(hfdata, "_datasets_installed", lambda: False)
    with pytest.raises(ConfigError) as e:
        hfdata.check_source("math-level345", tmp_path)
    msg = one_line(e.value)
    assert "data.data_dir=DIR" in msg and "math_level345/train.jsonl" in msg
    with pytest.raises(ConfigError) as e:
        hfdata.check_source(str(tmp_path / "none.jsonl"))
    assert "not found" in one_line(e.value)


def test_a_jsonl_file_with_prompt_fields_and_no_ids(tmp_path):
    path = tmp_path / "mine.jsonl"
    hfdata.write_jsonl(path, [{"prompt": "What is 1+1?", "answer": 2}, {"question": "What is 2+2?", "answer": "4"}])
    ts = hfdata.TrainingSet.load(str(path))
    assert [(p.id, p.problem, p.answer) for p in ts.problems] == [
        (f"{path}-0", "What is 1+1?", "2"), (f"{path}-1", "What is 2+2?", "4")]
    hfdata.write_jsonl(path, [{"id": "x", "problem": "a"}, {"id": "x", "problem": "b"}])
    with pytest.raises(ConfigError) as e:
        hfdata.TrainingSet.load(str(path))
    assert "duplicate id" in one_line(e.value)
    hfdata.write_jsonl(path, [{"id": "x", "answer": "1"}])
    with pytest.raises(ConfigError) as e:
        hfdata.TrainingSet.load(str(path))
    assert "no problem text" in one_line(e.value)


def test_hub_rows_are_mapped_like_the_local_schema(monkeypatch):
    """A hub set (here a stand-in for ``datasets.load_dataset``) is renamed and its answers extracted."""
    import sys
    import types

    fake = types.ModuleType("datasets")
    calls = []

    def load_dataset(path, **kw):
        calls.append((path, kw))
        if path == "openai/gsm8k":
            return [{"question": "Q1?", "answer": "work <<1+1=2>>\n#### 1,002"}]
        return [{"prompt": "P?", "answer": "3"}]

    fake.load_dataset = load_dataset
    monkeypatch.setitem(sys.modules, "datasets", fake)
    monkeypatch.setattr(hfdata, "_datasets_installed", lambda: True)
    monkeypatch.delenv("CORL_BENCH_DATA", raising=False)
    ts = hfdata.TrainingSet.load("gsm8k-train")
    assert (ts.problems[0].problem, ts.problems[0].answer) == ("Q1?", "1002")
    assert calls[0] == ("openai/gsm8k", {"name": "main", "split": "train"})
    ts = hfdata.TrainingSet.load("hub:acme/set:dev")
    assert (ts.problems[0].problem, ts.problems[0].answer) == ("P?", "3") and calls[-1][1] == {"split": "dev"}


# ------------------------------------------------------------------------------------------------ epochs and resume
def test_epochs_are_seeded_permutations_and_a_replay_resumes_exactly():
    ts = hfdata.TrainingSet.load("gsm8k-train", FIXTURES)
    ids = [p.id for p in ts.problems]
    stream = [p.id for p in islice(ts.epochs(3), 30)]
    assert sorted(stream[:10]) == sorted(ids) and sorted(stream[10:20]) == sorted(ids)
    assert stream[:10] != stream[10:20]  # each epoch in its own order
    assert stream == [p.id for p in islice(ts.epochs(3), 30)]  # the same seed replays the same stream
    assert stream[:10] != [p.id for p in islice(ts.epochs(4), 10)]
    resumed = ts.epochs(3)
    skipped = sum(1 for _ in islice(resumed, 13))  # what Trainer.load_state_dict does
    assert skipped == 13 and [p.id for p in islice(resumed, 17)] == stream[13:]


def test_the_trainer_pool_and_resume_contract_hold_for_the_hf_stream(tmp_path):
    """``data.train_pool`` epochs over the hf stream and the trainer's replay-to-position resume."""
    from corl_bench.hf.profile import HFProfile
    from corl_bench.train.trainer import Trainer

    cfg = load_config(None, ["model.profile=hf", "data.train=gsm8k-train", f"data.data_dir={FIXTURES}",
                             "data.train_pool=4", "rollout.prompts_per_step=3"])
    prof = HFProfile(cfg.model)
    prof.configure(cfg)

    class NoMethod:
        def state_dict(self):
            return {}

        def load_state_dict(self, state):
            pass

    a = Trainer(cfg, [], NoMethod(), prof, tmp_path)
    first = [p.id for p in islice(a.stream, 12)]
    assert len(set(first)) == 4 and sorted(first[:4]) == sorted(first[4:8])
    b = Trainer(cfg, [], NoMethod(), prof, tmp_path)
    b.load_state_dict({"consumed": 5, "method": {}})
    assert [p.id for p in islice(b.stream, 7)] == first[5:]


# ------------------------------------------------------------------------------------------------ contamination
def test_contaminated_problems_are_dropped_exactly_and_normalised():
    ts = hfdata.TrainingSet.load("gsm8k-train", FIXTURES)
    report = ts.decontaminate({"gsm8k": _bench_items(), "other": [Item("z", "Unrelated?", "1")]})
    assert report["dropped"] == 2 and sorted(report["dropped_ids"]) == ["g4", "g5"]
    assert report["by_benchmark"] == {"gsm8k": {"exact": 1, "normalised": 1, "options": 0},
                                      "other": {"exact": 0, "normalised": 0, "options": 0}}
    assert report["problems_before"] == 10 and report["problems_after"] == 8 == len(ts.problems)
    assert all(p.id not in ("g4", "g5") for p in islice(ts.epochs(0), 24))
    assert hfdata.normalise("a box holds  ６ eggs.\nHow") == hfdata.normalise("A box holds 6 eggs. How")


def test_a_multiple_choice_problem_is_found_whatever_the_layout_of_its_options():
    """A training row appends its options as ``Choices:`` + ``(A) ...``; MathVision items write ``(A) ...`` lines and
    MathVerse ``A:...``: the same problem is dropped whatever the layout, a different option text is not."""
    stem = "Which picture shows the kittens?\n<image1>"
    ts = hfdata.TrainingSet("mc", [
        hfdata.TrainProblem("t1", stem + "\nChoices:\n(A) A\n(B) B\n(C) C", "B"),
        hfdata.TrainProblem("t2", "Find x.\nChoices:\n(A) 1\n(B) 2", "B"),
        hfdata.TrainProblem("t3", stem + "\nChoices:\n(A) A\n(B) B\n(C) D", "B"),
        hfdata.TrainProblem("t4", "Unrelated?", "1")])
    report = ts.decontaminate({"mathvision": [Item("m6", stem + "\n(A) A\n(B) B\n(C) C", "B")],
                               "mathverse": [Item("v1", "Find x.\nChoices:\nA:1\nB:2", "B")]})
    assert sorted(report["dropped_ids"]) == ["t1", "t2"] and [p.id for p in ts.problems] == ["t3", "t4"]
    assert report["by_benchmark"]["mathvision"]["options"] == 1 == report["by_benchmark"]["mathverse"]["options"]


@pytest.mark.shared_data
def test_mathvision_test_loses_all_of_testmini_to_decontamination():
    for path in ("mathvision/test.jsonl", "mathvision/testmini.jsonl"):
        if not (SHARED_DATA / path).is_file():
            pytest.skip(f"{SHARED_DATA / path} is absent (the offline data copies live in ../shared/data)")
    from corl_bench.eval.data import load_rows
    from corl_bench.eval.items import build_items
    from corl_bench.eval.specs import get_spec

    ts = hfdata.TrainingSet.load(str(SHARED_DATA / "mathvision" / "test.jsonl"))
    spec = get_spec("mathvision_testmini")
    report = ts.decontaminate({"mathvision_testmini": build_items(spec, load_rows(spec, SHARED_DATA))})
    assert report["dropped"] == 304 and report["problems_after"] == 3040 - 304  # testmini is a subset of test


def test_a_set_that_is_all_benchmark_is_refused():
    ts = hfdata.TrainingSet("copy", [hfdata.TrainProblem(it.id, it.problem, it.gold) for it in _bench_items()])
    with pytest.raises(ConfigError) as e:
        ts.decontaminate({"gsm8k": _bench_items()})
    assert "every training problem overlaps" in one_line(e.value)


@pytest.mark.shared_data
def test_math_level345_has_no_math500_overlap_and_gsm8k_train_none_with_its_test():
    for path in ("math_level345/train.jsonl", "math500/test.jsonl", "gsm8k/train.jsonl", "gsm8k/test.jsonl"):
        if not (SHARED_DATA / path).is_file():
            pytest.skip(f"{SHARED_DATA / path} is absent (the offline data copies live in ../shared/data)")
    from corl_bench.eval.data import load_rows
    from corl_bench.eval.items import build_items
    from corl_bench.eval.specs import get_spec

    ts = hfdata.TrainingSet.load("math-level345", SHARED_DATA)
    assert len(ts.problems) == 8888
    math500 = build_items(get_spec("math500"), load_rows(get_spec("math500"), SHARED_DATA))
    assert ts.decontaminate({"math500": math500})["dropped"] == 0  # removed upstream on the same rule
    gsm = hfdata.TrainingSet.load("gsm8k-train", SHARED_DATA)
    gsm_test = build_items(get_spec("gsm8k"), load_rows(get_spec("gsm8k"), SHARED_DATA))
    assert gsm.decontaminate({"gsm8k": gsm_test})["problems_after"] == len(gsm.problems)


# ------------------------------------------------------------------------------------------------ rephrased view
def test_rewrites_are_cleaned_and_must_keep_the_problem():
    from corl_bench.hf.rephrase import clean, keeps_problem

    assert clean("Rewritten problem: Ann has 3 cats.\nSolution: 3") == "Ann has 3 cats."
    assert keeps_problem("Tom has 3 and 4.", "In a shop, Tom holds 4 and 3.")
    assert not keeps_problem("Tom has 3 and 4.", "Tom has 3.")  # a number dropped
    assert not keeps_problem("Tom has 3 and 4.", "3 + 4 = \\boxed{7}")  # solved instead of rewritten
    assert not keeps_problem("Tom has 3.", "   ")
    # what SmolLM2 wrote for real problems (the cache of a smol-cross-family-rephrased run)
    assert not keeps_problem("What is 5 x 6?", 'The answer to the question "What is 5 x 6?" is a short story.')
    assert not keeps_problem("Ann buys 160 pens and 70 pencils. How many items?",
                             "The answer to this math problem is 160 + 70 = 230.")
    assert not keeps_problem("Tom has 16 boxes. How many?", "Tom has 16 boxes. How many? " + "He works. " * 40)
    assert not keeps_problem("What is 5 x 6?", "Sam has 5 bags of 6 apples.")  # no longer asks
    assert keeps_problem("What is 5 x 6?", "Sam has 5 bags with 6 apples each. How many apples are there?")


def test_the_rephrased_view_is_written_once_per_problem_and_cached(tmp_path):
    """A tiny model rewrites the problems a step draws in one batch; the cache records model, prompt and seed; a
    new run reads it back without loading the model; the rephrased problem keeps its id."""
    from corl_bench.hf.rephrase import PROMPT, Rephraser
    from tests.conftest import build_tiny

    loads = []

    def load():
        loads.append(1)
        return build_tiny("qwen2-bpe")

    ts = hfdata.TrainingSet.load("gsm8k-train", FIXTURES)
    reph = Rephraser("tiny", load, tmp_path, batch=3, max_new_tokens=8)
    stream = ts.epochs(0, note=reph.note, rephraser=reph)
    step = list(islice(stream, 3))
    texts = [p.text("rephrased") for p in step]
    assert len(loads) == 1 and reph.stats["written"] == 3  # one batch for the step's three problems
    rows = [json.loads(x) for x in reph.rows_path.read_text().split("\n") if x.strip()]
    assert [r["id"] for r in rows] == [p.id for p in step]
    manifest = json.loads((reph.dir / "manifest.json").read_text())
    assert manifest["model"] == "tiny" and manifest["prompt"] == PROMPT and manifest["seed"] == 0
    for p, text, row in zip(step, texts, rows):  # a random model's rewrite drops numbers: the original is kept
        assert text == (p.problem if row["fallback"] else row["text"])

    def no_load():
        raise AssertionError("the cache should answer")

    again = Rephraser("tiny", no_load, tmp_path, batch=3, max_new_tokens=8)
    assert [again.rephrase(p) for p in step] == texts and again.stats["cached"] == 3
    other = Rephraser("tiny", load, tmp_path, seed=1, batch=3, max_new_tokens=8)
    assert other.dir != reph.dir  # another seed (or model, or prompt) writes elsewhere


def test_the_generated_arithmetic_set_needs_no_file_and_is_the_same_everywhere(monkeypatch):
    from corl_bench.hf.data import TrainingSet, check_source

    monkeypatch.delenv("CORL_BENCH_DATA", raising=False)
    assert check_source("arith-1digit", None).kind == "generated"
    a, b = TrainingSet.load("arith-1digit"), TrainingSet.load("arith-1digit")
    assert len(a.problems) == 5000 and [p.problem for p in a.problems] == [p.problem for p in b.problems]
    for p in a.problems[:200]:
        x, op, y = p.problem.removeprefix("What is ").removesuffix("?").split()
        x, y = int(x), int(y)
        assert 1 <= x <= 9 and 1 <= y <= 9
        assert int(p.answer) == {"+": x + y, "-": x - y, "x": x * y}[op] >= 0


@pytest.mark.shared_data
def test_the_hf_dev_split_is_disjoint_from_math500_and_math_level345_and_dropped_from_math_train():
    for path in ("math_train/train.jsonl", "math_level345/train.jsonl", "math500/test.jsonl"):
        if not (SHARED_DATA / path).is_file():
            pytest.skip(f"{SHARED_DATA / path} is absent (the offline data copies live in ../shared/data)")
    from corl_bench.eval.data import load_rows
    from corl_bench.eval.items import build_items
    from corl_bench.eval.specs import get_spec
    from corl_bench.hf.profile import HFProfile

    assert HFProfile.dev_benchmark() == "math-dev"
    dev = build_items(get_spec("math-dev"), load_rows(get_spec("math-dev"), SHARED_DATA))
    math500 = build_items(get_spec("math500"), load_rows(get_spec("math500"), SHARED_DATA))
    assert len(dev) == 564
    assert not {hfdata.normalise(i.problem) for i in dev} & {hfdata.normalise(i.problem) for i in math500}
    assert hfdata.TrainingSet.load("math-level345", SHARED_DATA).decontaminate({"math-dev": dev})["dropped"] == 0
    report = hfdata.TrainingSet.load("math-train", SHARED_DATA).decontaminate({"math-dev": dev})
    assert report["dropped"] >= 564 - 5  # every dev problem leaves the training stream (a few texts repeat in MATH)
