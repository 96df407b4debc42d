"""An optional LLM judge for the multimodal benchmarks: a second look at answers the rules marked wrong.

The paper's early table describes a "two-stage grader — the LLM judge only recovers rule-grading false negatives and
never overturns a rule-credited answer"; its release grades by rules only (``corl-paper-and-code.md`` §4.3), and the
MM-UPT comparison used a Qwen2.5-32B-Instruct judge "on question + extracted answer". Here the judge is off unless
asked for (``corl-bench eval --judge MODEL``; :func:`corl_bench.eval.evaluator.evaluate`'s ``judge``), and:

* it sees only rows the rule grader marked wrong **that have an extracted answer** (a completion with no final answer
  is a format failure, not a grading one); a rule-credited row is never shown to it, so it can never overturn one;
* it is a causal LM loaded with ``transformers`` from a local folder or a hub id in the local Hugging Face cache; an
  absent model is one ConfigError line before anything is generated (:func:`check_judge`);
* it is asked :data:`JUDGE_PROMPT` (in its chat template when it has one), decoded greedily for a few tokens, and
  its reply is read by :func:`parse_verdict` (YES / NO; anything else counts as no);
* each judged row keeps ``judge: {"model", "verdict", "output"}`` and counts as right only when the verdict is yes;
  ``corl-bench table`` re-grades from the rules and honours the stored verdict (it never re-runs the judge).

The question shown is the item's problem text (with its options); the reference is the gold, for a multiple-choice
item the letter and the option's text. Images are not shown: the judge compares two answers to a stated question.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from corl_bench.config import ConfigError

log = logging.getLogger(__name__)

JUDGE_PROMPT = (
    "You are grading the final answer to a math problem against the reference answer.\n\n"
    "Problem:\n{question}\n\n"
    "Reference answer: {reference}\n"
    "Candidate's final answer: {answer}\n\n"
    "Is the candidate's final answer mathematically equivalent to the reference answer (the same value, expression "
    "or option)? Reply with exactly one word: YES or NO."
)
"""The fixed prompt (``{question}``, ``{reference}``, ``{answer}``)."""

_VERDICT = re.compile(r"\b(yes|no|correct|incorrect|equivalent|not\s+equivalent)\b", re.IGNORECASE)
_YES = {"yes", "correct", "equivalent"}


def parse_verdict(text: Optional[str]) -> Optional[bool]:
    """The judge's verdict: True for YES (also "correct", "equivalent"), False for NO ("incorrect", "not
    equivalent"), by the first such word of the reply (markdown, brackets and case ignored); None when there is
    none."""
    if not text:
        return None
    m = _VERDICT.search(text)
    if m is None:
        return None
    word = " ".join(m.group(1).lower().split())
    return word in _YES


def check_judge(ref: str) -> Path:
    """The judge model's folder (a ``save_pretrained`` folder, or a hub id's snapshot in the local Hugging Face
    cache); a one-line ConfigError when it is absent (the judge is never downloaded mid-evaluation)."""
    from corl_bench.models.hub import HUB_ID, hub_cache_dirs, hub_snapshot

    path = Path(ref).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise ConfigError(f"judge model {ref}: not a model folder (no config.json); pass a save_pretrained folder "
                              "of a causal LM or a hub id in the local Hugging Face cache")
        return path
    if HUB_ID.match(ref):
        found = hub_snapshot(ref)
        if found is None:
            raise ConfigError(f"judge model {ref!r} is not in the local Hugging Face cache ({hub_cache_dirs()[0]}); "
                              f"fetch it first (hf download {ref.partition('@')[0]}) or pass a local folder")
        return found
    raise ConfigError(f"judge model {ref!r} does not exist: pass a save_pretrained folder or a hub id (owner/name) "
                      "in the local Hugging Face cache")


def reference_text(gold: str, choices: Sequence[str] = ()) -> str:
    """The reference the judge sees: the gold, for a multiple-choice item its letter and option text."""
    from corl_bench.eval.scoring import LETTERS

    g = str(gold).strip()
    if choices and len(g) == 1 and g in LETTERS[:len(choices)] and str(choices[LETTERS.index(g)]).strip():
        return f"({g}) {str(choices[LETTERS.index(g)]).strip()}"
    return g


class Judge:
    """A causal LM that re-checks rule-wrong answers (see the module docstring). ``ref``: a model folder or a cached
    hub id, checked here (before any generation); the weights load on the first :meth:`review` that needs them."""

    def __init__(self, ref: str, *, device: str | None = None, max_new_tokens: int = 8, batch_size: int = 8) -> None:
        self.ref = ref
        self.path = check_judge(ref)
        self.device = device
        self.max_new_tokens = max_new_tokens
        self.batch_size = batch_size
        self._model: Any = None
        self._tok: Any = None

    def _load(self) -> None:
        if self._model is None:
            from corl_bench.models.load import load_folder

            self._model, self._tok = load_folder(self.path, device=self.device)

    def prompt(self, question: str, reference: str, answer: str) -> str:
        """The judge's input text: :data:`JUDGE_PROMPT` filled, as one user turn in its chat template if any."""
        text = JUDGE_PROMPT.format(question=question.strip(), reference=reference, answer=answer.strip())
        self._load()
        if getattr(self._tok, "chat_template", None):
            return self._tok.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                                 add_generation_prompt=True)
        return text

    def generate(self, prompts: Sequence[str]) -> list[str]:
        """Greedy replies (``max_new_tokens``) to ``prompts``, in batches."""
        import torch

        self._load()
        tok, model, out = self._tok, self._model, []
        for start in range(0, len(prompts), self.batch_size):
            part = list(prompts[start:start + self.batch_size])
            enc = tok(part, return_tensors="pt", padding=True).to(model.device)
            with torch.no_grad():
                ids = model.generate(**enc, do_sample=False, max_new_tokens=self.max_new_tokens,
                                     pad_token_id=tok.pad_token_id)
            out += tok.batch_decode(ids[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        return out

    def review(self, rows: list[dict[str, Any]], items: Sequence[Any]) -> int:
        """Ask about every row (``rows[i]`` graded for ``items[i]``) the rules marked wrong and that has an extracted
        answer; record ``judge`` on those rows and credit them on a YES. Returns how many verdicts were yes."""
        todo = [i for i, row in enumerate(rows) if not row.get("correct") and row.get("extracted") is not None]
        if not todo:
            return 0
        prompts = [self.prompt(str(getattr(items[i], "problem", "")),
                               reference_text(rows[i]["gold"], rows[i].get("choices") or ()),
                               str(rows[i]["extracted"])) for i in todo]
        replies = self.generate(prompts)
        yes = 0
        for i, reply in zip(todo, replies):
            verdict = parse_verdict(reply)
            rows[i]["judge"] = {"model": self.ref, "verdict": verdict, "output": reply}
            if verdict is True:
                rows[i]["correct"] = True
                yes += 1
        log.info("judge %s: %d of %d rule-wrong answers judged right", self.ref, yes, len(todo))
        return yes


def judged(row: Mapping[str, Any]) -> bool:
    """Whether a prediction row was credited by the judge (and not by the rules)."""
    return (row.get("judge") or {}).get("verdict") is True
