"""Benchmark items and prompts: rows of a benchmark (any source) -> what a model is asked, and what counts as right.

``build_items(spec, rows)`` turns rows into :class:`Item`\\ s:

* math — ``problem`` / ``answer`` (GSM8K, MATH-500, AMC, AIME, Minerva, OlympiadBench); the multimodal sets
  (MathVision, MathVerse, MathVista, We-Math) too: a row whose ``question_type`` is not ``free_form`` and that has
  ``choices`` becomes a multiple-choice item — ``Item.choices`` holds the option texts in letter order, the options
  follow the problem as the spec's ``choices_template`` says (``(A) text`` lines), and a gold written as an option's
  text becomes that option's letter (MathVista's local copy), as the paper's data preparation maps answers to
  letters. ``Item.images`` holds the row's image files (absolute paths, in order; resolved by
  :mod:`corl_bench.eval.multimodal`); ``meta["images"]`` the same paths relative to the data directory, for the
  prediction rows. MathVision's ``<image1>`` placeholders stay in the text as written: they are plain text, not a
  model's image token (the model's processor places the image itself, before the text);
* mcq — GPQA: the question followed by lettered options ``(A) ...``; gold = the letter. The options are the Co-RL
  order (``corl_choices`` / ``corl_answer_letter``: ``random.Random(row_index).shuffle``) when present, else
  ``choices`` (+ ``answer`` letter) as given;
* code — HumanEval (``prompt``, ``test``, ``entry_point``), MBPP (``text``, ``code``, ``test_list``,
  ``test_setup_code``) and LiveCodeBench (``question_content``, ``starter_code``, decoded tests); the tests live in
  ``Item.meta`` and are run by :mod:`corl_bench.eval.codeexec`.

``render(spec, item, tokenizer)`` fills the spec's template; with ``chat_template: true`` and a tokenizer that has
one, the filled template becomes one user turn (after ``system`` if given) rendered with
``apply_chat_template(..., add_generation_prompt=True)`` — the same text the lm-eval bridge produces. For an item
with images and a vision-language model that brings its own processor, the user turn holds one ``{"type": "image"}``
entry per image before the text, so the model's chat template places the images
(:meth:`corl_bench.models.hf_vlm.ProcessorCodec.chat`).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from corl_bench.eval.specs import BenchmarkSpec
from corl_bench.eval.scoring import LETTERS, gold_index
from corl_bench.config import ConfigError
from corl_bench.models.images import codec_of

IMAGES_KEY, IMAGES_REL_KEY = "_images", "_images_rel"
"""Row keys :func:`corl_bench.eval.data.load_rows` adds to the rows of a benchmark with images: absolute paths, and
the same paths relative to the data directory (never written by ``corl-bench data prepare``)."""


@dataclass(frozen=True)
class Item:
    id: str
    problem: str
    """what ``{problem}`` in the spec's prompt renders to"""
    gold: str
    """the answer (math), the letter (mcq and multiple-choice math items), or "" (code: the tests decide)"""
    meta: Mapping[str, Any] = field(default_factory=dict)
    images: tuple[str, ...] = ()
    """the item's image files (absolute paths, in the order the problem refers to them); empty for text items"""
    choices: tuple[str, ...] = ()
    """option texts in letter order (A, B, ...) of a multiple-choice item; empty for free-form items"""


def _as_list(value: Any) -> list[Any]:
    if isinstance(value, list):
        return value
    if isinstance(value, str):
        try:
            parsed = ast.literal_eval(value)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            parsed = None
        if isinstance(parsed, (list, tuple)):
            return list(parsed)
    raise ValueError(f"the options must be a list (got {str(value)[:40]!r})")


def _mcq(row: Mapping[str, Any]) -> tuple[str, str]:
    if "corl_choices" in row:
        choices, gold = _as_list(row["corl_choices"]), str(row["corl_answer_letter"])
    else:
        choices, gold = _as_list(row["choices"]), str(row["answer"])
    question = str(row.get("question") or row["problem"]).strip()
    return f"{question}\n\n{options_text(choices)}", gold.strip().upper()


def options_text(choices: Sequence[Any], skip_empty: bool = False) -> str:
    """``(A) text`` lines of a multiple-choice item's options; ``skip_empty``: leave out empty texts (letters the
    item skips, see :func:`_choices`)."""
    return "\n".join(f"({LETTERS[i]}) {str(c).strip()}" for i, c in enumerate(choices)
                     if str(c).strip() or not skip_empty)


def _choices(row: Mapping[str, Any]) -> tuple[str, ...]:
    """The option texts of a multiple-choice row (``choices`` given and ``question_type`` not free-form), else ()."""
    raw = row.get("choices")
    if not raw or str(row.get("question_type", "multi_choice")).replace("-", "_") == "free_form":
        return ()
    options = tuple(str(c) for c in _as_list(raw))
    if len(options) > len(LETTERS):
        raise ValueError(f"{len(options)} options; at most {len(LETTERS)} (A-{LETTERS[-1]}) are supported")
    letters = row.get("choice_letters")  # We-Math: one item's options are A, B, C, F
    if isinstance(letters, str) and len(letters) == len(options) and letters != LETTERS[:len(options)] \
            and all(c in LETTERS for c in letters):
        padded = [""] * (max(LETTERS.index(c) for c in letters) + 1)
        for c, text in zip(letters, options):
            padded[LETTERS.index(c)] = text
        options = tuple(padded)
    return options


def _math(spec: BenchmarkSpec, row: Mapping[str, Any], rid: str) -> Item:
    problem, gold = str(row["problem"]), str(row["answer"])
    choices = _choices(row)
    if choices:
        if spec.choices_template:
            problem += spec.choices_template.format(options=options_text(choices, skip_empty=True))
        idx = gold_index(gold, choices)
        if idx is not None:
            gold = LETTERS[idx]
    images = tuple(str(p) for p in row.get(IMAGES_KEY) or ())
    if spec.modality == "image" and not images:
        raise ValueError("no image (a modality: image benchmark needs one per item)")
    meta: dict[str, Any] = {}
    if images:
        meta["images"] = list(row.get(IMAGES_REL_KEY) or images)
    if spec.record_fields:
        meta["record"] = {f: row.get(f) for f in spec.record_fields}
    return Item(rid, problem, gold, meta, images=images, choices=choices)


def _code(row: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    if "entry_point" in row:  # HumanEval
        return str(row["prompt"]), {"kind": "humaneval", "prompt": row["prompt"], "test": row["test"],
                                    "entry_point": row["entry_point"]}
    if "test_list" in row:  # MBPP
        tests = list(row["test_list"])
        text = f"{row.get('text') or row.get('prompt')} Your code should pass these tests:\n\n" + "\n".join(tests)
        return text, {"kind": "mbpp", "tests": tests, "setup": row.get("test_setup_code") or "",
                      "imports": list(row.get("test_imports") or [])}
    if "question_content" in row:  # LiveCodeBench
        starter = row.get("starter_code") or ""
        text = str(row["question_content"]).strip()
        if starter:
            text += f"\n\nUse this starter code:\n```python\n{starter}\n```"
        return text, {"kind": "livecodebench", "tests": row["tests"], "starter_code": starter,
                      "func_name": row.get("func_name")}
    raise ConfigError("a code benchmark row needs HumanEval (entry_point), MBPP (test_list) or LiveCodeBench "
                      "(question_content) fields")


def build_items(spec: BenchmarkSpec, rows: Sequence[Mapping[str, Any]]) -> list[Item]:
    items = []
    for i, row in enumerate(rows):
        rid = str(row.get("id", row.get("task_id", row.get("question_id", i))))
        try:
            if spec.task == "math":
                items.append(_math(spec, row, rid))
            elif spec.task == "mcq":
                problem, gold = _mcq(row)
                items.append(Item(rid, problem, gold))
            else:
                problem, meta = _code(row)
                items.append(Item(rid, problem, "", meta))
        except KeyError as e:
            raise ConfigError(f"benchmark {spec.name}: row {rid!r} has no field {e.args[0]!r}; check the data file "
                              "or the spec's source.fields mapping") from None
        except (ValueError, TypeError, IndexError) as e:
            why = " ".join(str(e).split())[:200]
            raise ConfigError(f"benchmark {spec.name}: row {rid!r}: {why}; fix the data file") from None
    return items


def render(spec: BenchmarkSpec, item: Item, tokenizer: Any = None) -> str:
    """The exact prompt text given to the model for ``item``."""
    text = spec.prompt.format(problem=item.problem)
    images = getattr(item, "images", ()) or ()
    chat = getattr(codec_of(tokenizer), "chat", None) if images and tokenizer is not None else None
    if spec.chat_template and images and chat is not None:  # a real VLM: its template places the images
        return chat(text, len(images), spec.system)
    if spec.chat_template and tokenizer is not None and getattr(tokenizer, "chat_template", None):
        messages = ([{"role": "system", "content": spec.system}] if spec.system else []) + \
                   [{"role": "user", "content": text}]
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) + \
            spec.response_prefix
    return text + spec.response_prefix
