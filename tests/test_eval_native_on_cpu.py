"""``corl-bench eval --items FILE --prompt native``: a fixed subset of problem ids, and each model asked in its own
format (a chat model zero-shot in its template, a base model few-shot as plain text), with tiny ``save_pretrained``
models and the made-up GSM8K rows of tests/fixtures/hf; the shots are checked against the real test sets where the
offline data copy (../shared/data) is present."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corl_bench.config import ConfigError
from corl_bench.eval.items import Item, render
from corl_bench.eval.native import GSM8K_SHOTS, MBPP_SHOTS, MINERVA_SHOTS, native_spec, style_of
from corl_bench.eval.scoring import extract_first_letter, grade_text
from corl_bench.eval.specs import get_spec
from tests.conftest import build_tiny

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hf"
DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")
TEXT_BENCHMARKS = ("gsm8k", "math500", "aime24", "aime25", "amc83", "gpqa_diamond", "humaneval", "mbpp")


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    """A tiny chat model (with a template) and a tiny base model (without), saved with save_pretrained."""
    root = tmp_path_factory.mktemp("native")
    out = {}
    for name, family, template in (("chat", "qwen2-bpe", TEMPLATE), ("base", "llama-bpe", None)):
        model, tok = build_tiny(family, seed=1)
        if template:
            tok.chat_template = template
        model.save_pretrained(root / name)
        tok.save_pretrained(root / name)
        out[name] = root / name
    return out


@pytest.mark.parametrize("name", TEXT_BENCHMARKS)
@pytest.mark.parametrize("style", ["chat", "completion"])
def test_every_text_benchmark_has_a_native_prompt_that_renders(name: str, style: str) -> None:
    spec = get_spec(name)
    nat = native_spec(spec, style)
    item = Item("x", "Compute $\\frac{1}{2}$ of {4}.", "2")
    text = render(nat, item)  # no tokenizer: the template as plain text; braces in shots must not break format()
    assert "Compute $\\frac{1}{2}$ of {4}." in text
    reply = "+reply" if style == "chat" and name in ("humaneval", "mbpp") else ""
    assert nat.version == f"{spec.version}+native-{style}{reply}" and nat.grader == spec.grader
    assert nat.chat_template is (style == "chat") and nat.source == spec.source
    if style == "completion" and name == "humaneval":
        assert nat.prompt == spec.prompt  # the paper's base-model continuation is the native form
    else:
        assert nat.prompt != spec.prompt


def test_the_native_formats_are_the_documented_ones() -> None:
    gsm = native_spec(get_spec("gsm8k"), "completion")
    assert render(gsm, Item("x", "Q?", "1")).endswith("The answer is 8.\n\nQ: Q?\nA:") and "\n\nQ:" in gsm.decoding.stop
    math = native_spec(get_spec("math500"), "completion")
    assert render(math, Item("x", "P?", "1")).endswith("I hope it is correct.\n\nProblem:\nP?\n\nSolution:")
    mbpp = native_spec(get_spec("mbpp"), "completion")
    assert render(mbpp, Item("x", "T", "")).count("[BEGIN]") == 4 and mbpp.decoding.stop == ("[DONE]",)
    chat = native_spec(get_spec("gpqa_diamond"), "chat")
    assert chat.extractor == "letter" and "'Answer: $LETTER'" in chat.prompt
    with pytest.raises(ConfigError, match="native"):
        native_spec(get_spec("mathvision_testmini"), "chat")


def test_the_style_follows_the_chat_template(folders) -> None:
    from corl_bench.models.load import load_model

    for name, style in (("chat", "chat"), ("base", "completion")):
        _, tok = load_model(str(folders[name]))
        assert style_of(tok) == style
        text = render(native_spec(get_spec("gsm8k"), style), Item("x", "Q?", "1"), tok)
        assert text.startswith("<|user|>Q?") if style == "chat" else text.startswith("Q: There are 15 trees")


@pytest.mark.parametrize("text, letter", [(" (B) 10 eV", "B"), (" C. because", "C"), (" D", "D"),
                                          (" Answer: none", None), (" Both", None), ("", None)])
def test_first_letter_reads_the_first_option_letter(text: str, letter) -> None:
    assert extract_first_letter(text) == letter


def test_native_math_answers_are_read_from_the_answer_line_and_minervas_line() -> None:
    assert grade_text("3 + 4 = 7.\nThe answer is: 7", "7", "qwen", "math") == ("7", True)
    assert grade_text("...\nFinal Answer: The final answer is $\\frac{1}{2}$. I hope it is correct.", "1/2",
                      "qwen", "math")[1]


def _write_items(path: Path, obj) -> Path:
    path.write_text(json.dumps(obj), encoding="utf-8")
    return path


def test_items_file_errors_are_one_line(tmp_path) -> None:
    from corl_bench.eval.targets import _subset, read_items

    items = [Item(f"t{i}", "p", "1") for i in range(3)]
    bad = tmp_path / "bad.json"
    bad.write_text("{", encoding="utf-8")
    for path, match in ((bad, "not a readable JSON"), (_write_items(tmp_path / "l.json", [1]), "JSON object"),
                        (_write_items(tmp_path / "m.json", {"math500": []}), "no ids for gsm8k")):
        with pytest.raises(ConfigError, match=match) as e:
            read_items(path, ["gsm8k"])
        assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="no problem 't9'"):
        _subset("gsm8k", items, ["t1", "t9"], tmp_path)
    with pytest.raises(ConfigError, match="twice"):
        _subset("gsm8k", items, ["t1", "t1"], tmp_path)
    assert [it.id for it in _subset("gsm8k", items, ["t2", "t0"], tmp_path)] == ["t0", "t2"]  # benchmark order


def test_native_chat_code_continues_evalplus_reply_opening_and_is_graded_with_it() -> None:
    """EvalPlus' chat prompt: the assistant turn opens with its sentence and a ```python fence; the completion is
    the block's body, and the sandbox runs opening + completion's block (not the text after the closing fence)."""
    from corl_bench.eval.evaluator import _grade
    from corl_bench.eval.native import CODE_RESPONSE

    nat = native_spec(get_spec("mbpp"), "chat")
    assert render(nat, Item("x", "Add two numbers.", "")).endswith("```\n" + CODE_RESPONSE)
    assert render(native_spec(get_spec("mbpp"), "completion"), Item("x", "T", "")).endswith("[BEGIN]\n")
    meta = {"kind": "mbpp", "tests": ["assert add(2, 3) == 5"]}
    right = "def add(a, b):\n    return a + b\n```\n\nThe function adds ``a`` and ``b``."
    wrong = "def add(a, b):\n    return a - b\n```\n"
    graded = _grade(nat, [(Item("r", "", "", meta), right), (Item("w", "", "", meta), wrong)], timeout=10, workers=1)
    assert [(code, ok) for code, ok, _ in graded] == [("def add(a, b):\n    return a + b\n", True),
                                                     ("def add(a, b):\n    return a - b\n", False)]


def test_eval_with_items_and_native_prompt_writes_only_those_problems_in_the_models_format(folders, tmp_path) -> None:
    from corl_bench.eval.targets import run_eval
    from corl_bench.results import read_jsonl

    subset = _write_items(tmp_path / "items.json", {"gsm8k": ["t2", "t0"]})
    for name in ("chat", "base"):
        out = tmp_path / name
        run_eval(str(folders[name]), ["gsm8k"], data_dir=str(FIXTURES), out=out, items_file=subset,
                 prompt="native", overrides={"samples": 0, "greedy": True, "max_new_tokens": 4}, chunk=8)
        rows = read_jsonl(next(out.rglob("gsm8k.jsonl")))
        assert [r["problem_id"] for r in rows] == ["t0", "t2"] and all(r["decoding"] == "greedy" for r in rows)
        style = "chat" if name == "chat" else "completion"
        assert {r["benchmark_version"] for r in rows} == {f"1+native-{style}"}
        assert rows[0]["prompt"].startswith("<|user|>") if name == "chat" else rows[0]["prompt"].startswith("Q: ")
        manifest = json.loads(next(out.rglob("eval_manifest.json")).read_text(encoding="utf-8"))
        assert manifest["gsm8k"]["prompt"] == native_spec(get_spec("gsm8k"), style).prompt
    with pytest.raises(ConfigError, match="different extractor, prompt, version"):  # paper rows never join native ones
        run_eval(str(folders["chat"]), ["gsm8k"], data_dir=str(FIXTURES), out=tmp_path / "chat", items_file=subset,
                 overrides={"samples": 0, "greedy": True, "max_new_tokens": 4}, chunk=8)
    with pytest.raises(ConfigError, match="add --greedy"):
        run_eval(str(folders["chat"]), ["gsm8k"], data_dir=str(FIXTURES), out=tmp_path / "none", overrides={"samples": 0})
    with pytest.raises(ConfigError, match="--prompt must be one of"):
        run_eval(str(folders["chat"]), ["gsm8k"], prompt="fewshot")


@pytest.mark.skipif(not (DATA / "math500" / "test.jsonl").is_file(), reason="needs the offline data copy "
                    "../shared/data (see its README.md)")
def test_no_shot_is_a_test_item() -> None:
    def norm(text: str) -> str:
        return "".join(text.split()).lower()

    def problems(rel: str, field: str = "problem") -> set[str]:
        rows = [json.loads(x) for x in (DATA / rel).read_text(encoding="utf-8").splitlines() if x.strip()]
        return {norm(str(r.get(field) or r.get("text") or "")) for r in rows}

    tests = set().union(*(problems(p) for p in ("math500/test.jsonl", "gsm8k/test.jsonl", "aime24/test.jsonl",
                                                "aime25/test.jsonl", "amc23/aimo_83.jsonl")))
    shots = [q for q, _ in GSM8K_SHOTS + MINERVA_SHOTS]
    assert not [q for q in shots if norm(q) in tests]
    assert not {norm(t) for t, _, _ in MBPP_SHOTS} & problems("mbpp/test.jsonl", "text")
