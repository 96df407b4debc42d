"""The optional LLM judge: verdict parsing, the one-line error for an absent model (before any generation), a real
tiny causal LM built here from a config (its output head zeroed, so greedy decoding repeats vocabulary entry 0:
"YES" for one judge, "NO" for the other), and the rule that a rule-credited answer is never shown to the judge."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corl_bench.config import ConfigError
from corl_bench.eval.evaluator import evaluate, row_grader
from corl_bench.eval.items import Item
from corl_bench.eval.judge import JUDGE_PROMPT, Judge, check_judge, parse_verdict, reference_text
from corl_bench.eval.specs import parse_spec
from corl_bench.rollout.base import Completion

OPTS = ("40°", "60°", "120°", "140°")


def tiny_judge(folder: Path, first: str) -> Path:
    """A 1-layer Llama whose greedy reply is ``first`` repeated: a word-level tokenizer with ``first`` at id 0 and an
    all-zero output head (every logit ties; argmax takes the first id)."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    words = [first] + [w for w in ("YES", "NO", "maybe") if w != first] + ["[PAD]", "[UNK]", "</s>"]
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="[PAD]", unk_token="[UNK]", eos_token="</s>")
    cfg = LlamaConfig(vocab_size=len(words), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512,
                      pad_token_id=words.index("[PAD]"), eos_token_id=words.index("</s>"), bos_token_id=None,
                      tie_word_embeddings=False)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():
        model.lm_head.weight.zero_()
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def yes_judge(tmp_path_factory):
    return tiny_judge(tmp_path_factory.mktemp("judge-yes"), "YES")


@pytest.fixture(scope="module")
def no_judge(tmp_path_factory):
    return tiny_judge(tmp_path_factory.mktemp("judge-no"), "NO")


@pytest.mark.parametrize("reply, verdict", [
    ("YES", True), ("yes", True), ("Yes.", True), ("**YES**", True), ("[[YES]]", True), ("Answer: yes", True),
    ("Correct", True), ("They are equivalent.", True), ("YES YES YES", True),
    ("NO", False), ("no.", False), ("Incorrect", False), ("not equivalent", False), ("No, it is not.", False),
    ("NO, but yes in part", False),                                   # the first verdict word decides
    ("maybe", None), ("", None), (None, None), ("yesterday nobody came", None),  # whole words only
])
def test_parse_verdict(reply, verdict):
    assert parse_verdict(reply) is verdict


def test_an_absent_judge_model_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    for ref, words in ((str(tmp_path / "nope"), "does not exist"), ("someone/no-such-judge-model", "not in the local "
                                                                   "Hugging Face cache")):
        with pytest.raises(ConfigError) as e:
            check_judge(ref)
        assert "\n" not in str(e.value) and words in str(e.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="no config.json"):
        Judge(str(tmp_path / "empty"))


def test_run_eval_refuses_an_absent_judge_before_loading_any_data(tmp_path, monkeypatch):
    from corl_bench.eval import data, targets

    def never(*a, **kw):
        raise AssertionError("data was loaded before the judge was checked")

    monkeypatch.setattr(data, "load_rows", never)
    with pytest.raises(ConfigError) as e:
        targets.run_eval("smol", ["mathvision_testmini"], judge=str(tmp_path / "missing-judge"))
    assert "\n" not in str(e.value) and "judge model" in str(e.value)


def rows_for(completions_and_extracted):
    return [{"problem_id": f"p{i}", "gold": "C", "choices": list(OPTS), "correct": ok, "extracted": ex,
             "completion": comp} for i, (comp, ex, ok) in enumerate(completions_and_extracted)]


def test_the_judge_sees_only_rule_wrong_answers_and_credits_a_yes(yes_judge):
    judge = Judge(str(yes_judge), max_new_tokens=3)
    asked = []
    real = judge.generate
    judge.generate = lambda prompts: asked.extend(prompts) or real(prompts)
    rows = rows_for([("\\boxed{C}", "C", True), ("\\boxed{60}", "60", False), ("no answer", None, False)])
    items = [Item(r["problem_id"], "Angle CED?\n(A) 40°\n(B) 60°\n(C) 120°\n(D) 140°", "C", choices=OPTS)
             for r in rows]
    before = json.loads(json.dumps(rows[0]))
    assert judge.review(rows, items) == 1
    assert rows[0] == before                                   # rule-credited: untouched, never asked
    assert rows[1]["correct"] is True and rows[1]["judge"]["verdict"] is True and rows[1]["judge"]["model"] == \
        str(yes_judge) and "YES" in rows[1]["judge"]["output"]
    assert "judge" not in rows[2] and rows[2]["correct"] is False  # nothing extracted: not the judge's business
    assert len(asked) == 1 and "Candidate's final answer: 60" in asked[0] and "Reference answer: (C) 120°" in asked[0]
    assert asked[0] == JUDGE_PROMPT.format(question=items[1].problem, reference="(C) 120°", answer="60")


def test_a_no_verdict_leaves_the_answer_wrong(no_judge):
    rows = rows_for([("\\boxed{60}", "60", False)])
    Judge(str(no_judge), max_new_tokens=2).review(rows, [Item("p0", "q", "C", choices=OPTS)])
    assert rows[0]["correct"] is False and rows[0]["judge"]["verdict"] is False


def test_evaluate_with_a_judge_never_touches_rule_credited_rows_and_tables_agree(yes_judge, tmp_path):
    spec = parse_spec({"name": "mmj", "version": "1", "task": "math", "source": {"local": "mmj/test.jsonl"},
                       "prompt": "{problem}", "extractor": "boxed", "grader": "mc_letter_or_value",
                       "decoding": {"greedy": True, "samples": 0, "max_new_tokens": 8}})
    items = [Item("right", "q1", "C", choices=OPTS), Item("value", "q2", "C", choices=OPTS),
             Item("wrong", "q3", "C", choices=OPTS), Item("free", "q4", "7")]
    replies = {"q1": "\\boxed{(C)}", "q2": "\\boxed{120}", "q3": "\\boxed{B}", "q4": "\\boxed{8}"}

    def generate(prompts, params):
        return [[Completion((1,), (), replies[p], True)] for p in prompts]

    judge = Judge(str(yes_judge), max_new_tokens=2)
    scores = evaluate(generate, spec, items, out_path=tmp_path / "mmj.jsonl", judge=judge)
    rows = {r["problem_id"]: r for r in map(json.loads, (tmp_path / "mmj.jsonl").read_text().splitlines())}
    assert "judge" not in rows["right"] and "judge" not in rows["value"]      # credited by the rules
    assert rows["wrong"]["judge"]["verdict"] is True and rows["wrong"]["correct"] is True
    assert rows["free"]["judge"]["verdict"] is True and rows["free"]["correct"] is True
    assert scores.greedy == 1.0
    grade = row_grader(spec)
    assert [grade(rows[k])[1] for k in ("right", "value", "wrong", "free")] == [True] * 4  # table = stored
    assert reference_text("C", OPTS) == "(C) 120°" and reference_text("7") == "7"


def test_adding_or_dropping_the_judge_is_a_change_of_protocol(tmp_path):
    from corl_bench.eval.targets import check_manifest

    spec = parse_spec({"name": "mmj", "version": "1", "task": "math", "source": {"local": "mmj/test.jsonl"},
                       "prompt": "{problem}", "extractor": "boxed", "grader": "mc_letter_or_value",
                       "decoding": {"greedy": True, "samples": 0, "max_new_tokens": 8}})
    check_manifest(tmp_path, spec, spec.decoding, "m", "ours", seed=0, chunk=4, judge="judge-a")
    (tmp_path / "mmj.jsonl").write_text(json.dumps({"problem_id": "p"}) + "\n")
    check_manifest(tmp_path, spec, spec.decoding, "m", "ours", seed=0, chunk=4, judge="judge-a")  # same: resumes
    for other in (None, "judge-b"):
        with pytest.raises(ConfigError, match="different judge") as e:
            check_manifest(tmp_path, spec, spec.decoding, "m", "ours", seed=0, chunk=4, judge=other)
        assert "\n" not in str(e.value)
