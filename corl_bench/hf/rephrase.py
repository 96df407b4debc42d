"""The rephrased view of real training problems: a named model rewrites each problem once, greedily, and the rewrite
is cached on disk.

The paper's "Different family+" gives one agent a DeepSeek-V3 rewrite of every MATH problem that "recasts the
problem in a new scenario and never changes the answer". Here ``data.rephrase_model`` (default ``smol``) writes it,
lazily: only the problems a run draws are rewritten, in batches of the problems one step draws (the stream notes
every problem it yields; the first rephrased render of a step rewrites all of that step's problems at once).

Cache: ``<cache>/rephrase/<model>-<key>/`` with ``manifest.json`` (model, prompt, seed, token cap, version: what
decides a rewrite) and ``rephrased.jsonl`` (one row per problem: ``id``, ``sha`` of the original text, ``text``,
``fallback``). ``key`` hashes the manifest, so another model, prompt or seed writes elsewhere. The rewrite keeps the
problem's id (and its answer: views of one problem are aligned by id).

A rewrite is refused, and the original text used in its place (``fallback: true``, counted in :attr:`stats`), when
it is empty, drops a number of the original, no longer asks a question, runs on, or states an answer (a
``\\boxed{}``, or "answer" / "=" that the original does not contain): a small model's rewrite must not change the
problem it asks. The check reads the two texts only, never the dataset answer.
"""

from __future__ import annotations

import collections
import hashlib
import json
import logging
import re
from pathlib import Path
from typing import Any, Callable

log = logging.getLogger(__name__)

VERSION = "2"  # 2: rewrites that run on, stop asking or state an answer fall back
PROMPT = ("Rewrite the following math problem in different words, for example as a short story. Keep every number, "
          "every condition and the question exactly as they are. Do not solve it. Reply with the rewritten problem "
          "only.\n\nProblem: {problem}")
_NUM = re.compile(r"\d+(?:\.\d+)?")
_LEAD = re.compile(r"^\s*(?:\*\*)?(?:rewritten problem|rephrased problem|problem)\s*:?\s*(?:\*\*)?\s*:?\s*",
                   re.IGNORECASE)


def clean(text: str) -> str:
    """The rewrite without a leading "Rewritten problem:" label and without a solution the model appended."""
    text = _LEAD.sub("", text.strip())
    for marker in ("\nSolution", "\n**Solution", "\nAnswer:", "\nStep 1"):
        cut = text.find(marker)
        if cut > 0:
            text = text[:cut]
    return text.strip()


_SOLVING = re.compile(r"\banswer\b|=", re.IGNORECASE)


def keeps_problem(original: str, rewrite: str) -> bool:
    """A rewrite is accepted when it is non-empty, keeps every number of the original, still asks (a ``?`` when the
    original has one), does not solve it (no ``\\boxed``, and no "answer" or "=" that the original lacks) and has
    not run on (at most 3 x the original's length + 200 characters). Reads only the two texts, never the answer."""
    if not rewrite.strip() or "\\boxed" in rewrite:
        return False
    if len(rewrite) > 3 * len(original) + 200:
        return False
    if "?" in original and "?" not in rewrite:
        return False
    if _SOLVING.search(rewrite) and not _SOLVING.search(original):
        return False
    have = collections.Counter(_NUM.findall(rewrite))
    return all(have[n] >= 1 for n in set(_NUM.findall(original)))


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


class Rephraser:
    """Writes and caches the rephrased view; ``load()`` returns ``(model, tokenizer)`` of the rewriting model and is
    called on the first problem that is not cached yet."""

    def __init__(self, model: str, load: Callable[[], tuple[Any, Any]], cache_root: Path, *, seed: int = 0,
                 max_new_tokens: int = 256, batch: int = 8, prompt: str = PROMPT) -> None:
        self.model_ref = model
        self._load = load
        self._loaded: tuple[Any, Any] | None = None
        self.seed = seed
        self.max_new_tokens = max_new_tokens
        self.prompt = prompt
        self.manifest = {"model": model, "prompt": prompt, "seed": seed, "max_new_tokens": max_new_tokens,
                         "decoding": "greedy", "version": VERSION}
        key = hashlib.sha256(json.dumps(self.manifest, sort_keys=True).encode()).hexdigest()[:12]
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", model).strip("-")[-60:] or "model"
        self.dir = Path(cache_root) / "rephrase" / f"{safe}-{key}"
        self.pending: collections.deque = collections.deque(maxlen=max(1, batch))
        self._cache: dict[tuple[str, str], dict[str, Any]] | None = None
        self.stats = {"written": 0, "fallback": 0, "cached": 0}

    # ------------------------------------------------------------------ cache
    @property
    def rows_path(self) -> Path:
        return self.dir / "rephrased.jsonl"

    def _rows(self) -> dict[tuple[str, str], dict[str, Any]]:
        if self._cache is None:
            from corl_bench.results import read_complete_rows

            rows, _ = read_complete_rows(self.rows_path)
            self._cache = {(str(r["id"]), str(r["sha"])): r for r in rows}
        return self._cache

    def cached(self, problem: Any) -> str | None:
        row = self._rows().get((problem.id, _sha(problem.problem)))
        return None if row is None else str(row["text"])

    # ------------------------------------------------------------------ rewriting
    def note(self, problem: Any) -> None:
        """The stream yielded ``problem``: it joins the batch the next rewrite writes (bounded)."""
        self.pending.append(problem)

    def rephrase(self, problem: Any) -> str:
        """The rephrased text of ``problem`` (from the cache, else written now together with the noted problems)."""
        hit = self.cached(problem)
        if hit is not None:
            self.stats["cached"] += 1
            return hit
        todo = [problem] + [p for p in self.pending if p.id != problem.id and self.cached(p) is None]
        seen: set[str] = set()
        todo = [p for p in todo if not (p.id in seen or seen.add(p.id))]
        self._write(todo)
        return self.cached(problem) or problem.problem

    def render_request(self, text: str, tokenizer: Any) -> str:
        """The rewrite prompt for one problem, in the rewriting model's chat template when it has one."""
        body = self.prompt.format(problem=text)
        if getattr(tokenizer, "chat_template", None):
            return tokenizer.apply_chat_template([{"role": "user", "content": body}], tokenize=False,
                                                 add_generation_prompt=True)
        return body + "\n\nRewritten problem:"

    def _write(self, problems: list[Any]) -> None:
        from corl_bench.results import append_jsonl, write_json
        from corl_bench.rollout import SamplingParams, make_engine

        if self._loaded is None:
            self._loaded = self._load()
        model, tok = self._loaded
        engine = make_engine("hf", model, tok)
        prompts = [self.render_request(p.problem, tok) for p in problems]
        longest = max(len(tok(p.problem)["input_ids"]) for p in problems)
        cap = min(self.max_new_tokens, 2 * longest + 32)
        params = SamplingParams(n=1, greedy=True, max_new_tokens=cap, seed=self.seed, logprobs=False)
        outs = engine.generate(prompts, params)
        self.dir.mkdir(parents=True, exist_ok=True)
        if not (self.dir / "manifest.json").is_file():
            write_json(self.dir / "manifest.json", self.manifest)
        rows = []
        for p, comps in zip(problems, outs):
            text = clean(comps[0].text)
            ok = keeps_problem(p.problem, text)
            rows.append({"id": p.id, "sha": _sha(p.problem), "text": text if ok else p.problem, "fallback": not ok,
                         "rewrite": text})
            self.stats["written"] += 1
            self.stats["fallback"] += 0 if ok else 1
        append_jsonl(self.rows_path, rows)
        self._rows().update({(r["id"], r["sha"]): r for r in rows})
        log.info("rephrased %d problems with %s (%d kept the original: the rewrite dropped a number or solved it)",
                 len(rows), self.model_ref, sum(r["fallback"] for r in rows))
