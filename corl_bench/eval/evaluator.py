"""The one evaluation path: in a training run (every agent, every phase) and offline (``corl-bench eval``, the
probe, ``scripts/bench_eval.py``) alike, :func:`evaluate` generates what is missing, grades it with the spec and
appends it; scores are recomputed from the stored rows.

One row per (problem, decoding, sample index) goes to ``<out>/<benchmark>.jsonl``::

    {"benchmark", "benchmark_version", "problem_id", "decoding", "sample_index", "prompt", "completion",
     "extracted", "gold", "correct", "finished", "n_tokens", "status"?}      # status: code benchmarks only

Multimodal items add ``images`` (their image files relative to the data directory, so a table can be audited),
``choices`` (the option texts the ``mc_letter_or_value`` grader needs to re-grade the row), ``meta`` (the spec's
``record_fields``, e.g. We-Math's ``we_math_id`` / ``key``) and ``extractor`` (the extractor the row was graded with:
the spec's, or ``corl-bench eval --extractor``'s). With the optional LLM judge (:mod:`corl_bench.eval.judge`), a row
the rule grader marked wrong also carries ``judge`` (model, verdict, output) and counts as right when the verdict is
yes; a rule-credited row is never shown to the judge. Text rows are unchanged.

Greedy rows of every item come first, then the sampled rows. Rows are appended in complete lines after every chunk,
so an interrupted evaluation keeps what it finished and a re-run generates only the (problem, decoding, sample) keys
that are missing. Predictions made under another version of the benchmark are refused (delete them or write
elsewhere), never mixed.

**Seed rule** (``SEED_RULE = 3``): the items are cut into chunks of ``chunk`` problems over the *full* item list
(chunk ``i`` = ``items[i*chunk:(i+1)*chunk]``, whatever is already done), and the generate call of the chunk that
starts at item index ``start`` gets the sampling seed :func:`chunk_seed` ``(seed + start * 1_000_003) % 2**31``.
A chunk with a missing key is regenerated whole with its own seed and only the missing keys are kept, so a resumed
evaluation writes exactly the rows of an uninterrupted one. A training run evaluates each benchmark as one chunk
(``chunk=None``) with ``seed = eval_seed(run seed, agent seed offset)``: one generate call per decoding with that
seed, which is the in-run evaluation as it always was (its predictions are bit-identical to earlier versions).
Rule 1 (before this unification) seeded offline chunks with ``seed * 1_000_003 + crc32(first id)`` over the
*missing* items; rule 3 keeps rule 2's seeds but the ``fast`` engine draws its samples by inverse-CDF sampling instead
of ``torch.multinomial`` (same distribution, other random numbers for a seed); ``corl-bench eval`` records the rule
in its manifest and refuses to mix them.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

from corl_bench.config import ConfigError
from corl_bench.eval.items import Item, render
from corl_bench.eval.metrics import BenchmarkScores, score_predictions
from corl_bench.eval.scoring import extract_code, grade_text
from corl_bench.eval.specs import BenchmarkSpec, Decoding

log = logging.getLogger(__name__)
Key = tuple[str, str, int]
Generate = Callable[[list[Any], Any], list[list[Any]]]
"""``generate(prompts, params) -> completions``: ``prompts`` are ``str`` or request objects (with ``.text``),
``params`` a :class:`corl_bench.rollout.SamplingParams`; ``result[p]`` holds ``params.n``
:class:`corl_bench.rollout.Completion`\\ s of ``prompts[p]`` (an agent's or an engine's ``generate``)."""

SEED_RULE = 3
"""The version of the chunk-seed rule (see the module docstring); recorded in ``eval_manifest.json``."""


def eval_seed(run_seed: int, seed_offset: int) -> int:
    """The base evaluation seed of one agent of a training run (the same in every phase, so phases are paired)."""
    return (run_seed * 1_000_003 + seed_offset * 7_919 + 424_242) % (2**31)


def chunk_seed(seed: int, start: int) -> int:
    """Sampling seed of the chunk that starts at item index ``start`` (chunk 0 gets ``seed`` itself)."""
    return (seed + start * 1_000_003) % (2**31)


def run_decoding(cfg: Any, spec: BenchmarkSpec) -> Decoding:
    """The decoding of a training run's evaluation: the spec's, with the run's ``EvalConfig`` (``greedy``,
    ``samples``, ``temperature``, ``max_new_tokens``) in place of the spec's values."""
    return with_overrides(spec.decoding, samples=cfg.samples, greedy=cfg.greedy, temperature=cfg.temperature,
                          max_new_tokens=cfg.max_new_tokens)


def n_generations(cfg: Any, n_items: int) -> int:
    """Completions one evaluation of ``n_items`` problems generates under ``cfg`` (an ``EvalConfig``, or a
    :class:`Decoding`: no ``max_problems``)."""
    limit = getattr(cfg, "max_problems", 0)
    n = min(n_items, limit) if limit else n_items
    return n * ((1 if cfg.greedy else 0) + cfg.samples)


def request_for(spec: BenchmarkSpec, item: Any, tokenizer: Any = None) -> Any:
    """What the model is asked for ``item``: the item's own ``prompt()`` when it has one (a profile's items, e.g.
    the micro profile's, in the benchmark's original wording), else the spec's template rendered by
    :func:`corl_bench.eval.items.render` (chat template with ``tokenizer``): a plain ``str`` for a text item, a
    :class:`corl_bench.rollout.base.Request` with the item's ``images`` (absolute paths, in order) for an item that
    has them. The text carries no image token: the model's processor places the images."""
    own = getattr(item, "prompt", None)
    if callable(own):
        return own()
    text = render(spec, item, tokenizer)
    images = tuple(getattr(item, "images", ()) or ())
    if not images:
        return text
    from corl_bench.rollout.request import Request

    return Request(text=text, images=images)


def _text(prompt: Any) -> str:
    """The text a prediction row stores for a prompt (``str``, or a request's ``.text``)."""
    if isinstance(prompt, str):
        return prompt
    text = getattr(prompt, "text", None)
    return text if text is not None else str(prompt)


def row_grader(spec: BenchmarkSpec) -> Callable[[Mapping[str, Any]], tuple[Optional[str], bool]]:
    """How ``corl-bench table`` re-grades a stored row of this benchmark: the spec's extractor and grader on the
    completion; for code, the stored execution result (re-running every program is what ``eval`` does)."""
    if spec.task == "code":
        return lambda row: (row.get("extracted"), bool(row.get("correct")))

    def grade(row: Mapping[str, Any]) -> tuple[Optional[str], bool]:
        extracted, correct = grade_text(spec.response_prefix + str(row.get("completion") or ""), str(row["gold"]),
                                        row.get("extractor") or spec.extractor, spec.grader, row.get("choices"))
        if not correct and (row.get("judge") or {}).get("verdict") is True:
            correct = True  # the judge's stored verdict, given only where the rules said wrong
        return extracted, correct

    return grade


def _existing(path: Path, spec: BenchmarkSpec) -> list[dict[str, Any]]:
    from corl_bench.results import atomic_write_text, read_complete_rows

    rows, torn = read_complete_rows(path)
    for i in torn:
        log.warning("%s:%d is not complete JSON (an interrupted write); it will be regenerated", path, i)
    if torn:  # rewrite the complete rows (atomically) so appends start on a fresh line
        atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    versions = {str(r.get("benchmark_version")) for r in rows}
    if rows and versions != {spec.version}:
        raise ConfigError(f"{path} holds predictions for {spec.name} version(s) {', '.join(sorted(versions))}, not "
                          f"{spec.version}; delete the file or evaluate into another directory")
    return rows


def _params(dec: Decoding, decoding_name: str, n: int, seed: int) -> Any:
    from corl_bench.rollout import SamplingParams

    sampled = decoding_name == "sampled"
    return SamplingParams(n=n, greedy=not sampled, temperature=dec.temperature if sampled else 1.0,
                          top_p=dec.top_p if sampled else 1.0, max_new_tokens=dec.max_new_tokens,
                          stop=tuple(dec.stop), logprobs=False, seed=seed)


def _row_extras(spec: BenchmarkSpec, item: Any) -> dict[str, Any]:
    """The multimodal fields of a prediction row (none for a text item)."""
    extras: dict[str, Any] = {}
    if getattr(item, "images", ()):
        extras["images"] = list((getattr(item, "meta", None) or {}).get("images") or item.images)
    if getattr(item, "choices", ()):
        extras["choices"] = list(item.choices)
    record = (getattr(item, "meta", None) or {}).get("record")
    if record:
        extras["meta"] = dict(record)
    if spec.modality == "image":
        extras["extractor"] = spec.extractor
    return extras


def evaluate(generate: Generate, spec: BenchmarkSpec, items: Sequence[Any], *, out_path: Path, seed: int = 0,
             decoding: Decoding | None = None, chunk: int | None = None, tokenizer: Any = None, resume: bool = True,
             progress: Callable[[int], None] | None = None, code_timeout: float = 10.0,
             workers: int = 2, judge: Any = None) -> BenchmarkScores:
    """Generate what ``out_path`` lacks, grade it with the spec, append it; return the scores of ``items``' rows.

    ``generate(prompts, params)``: see :data:`Generate` (an agent's ``generate``, or an engine's). ``items``: each
    has ``id`` and ``gold`` (code: ``meta`` with the tests) and either a ``prompt()`` method or what the spec's
    template renders (:func:`request_for`). ``seed``/``chunk``: the seed rule of the module docstring (``chunk``
    None = all items in one chunk). ``decoding``: default the spec's. ``resume=False`` deletes ``out_path`` first
    (a training run's phase starts fresh). ``progress(n)`` is called with the number of rows each chunk added.
    ``judge``: an optional :class:`corl_bench.eval.judge.Judge`, asked only about the rows the rules marked wrong.
    """
    dec = decoding or spec.decoding
    out_path = Path(out_path)
    if not resume and out_path.exists():
        out_path.unlink()
    rows = _existing(out_path, spec)
    done: set[Key] = {(str(r["problem_id"]), str(r["decoding"]), int(r["sample_index"])) for r in rows}
    plan: list[tuple[str, int]] = ([("greedy", 1)] if dec.greedy else []) + \
                                  ([("sampled", dec.samples)] if dec.samples else [])
    size = max(1, chunk or len(items))
    for decoding_name, n in plan:
        for start in range(0, len(items), size):
            part = items[start: start + size]
            if all((str(it.id), decoding_name, k) in done for it in part for k in range(n)):
                continue
            prompts = [request_for(spec, it, tokenizer) for it in part]
            outs = generate(prompts, _params(dec, decoding_name, n, chunk_seed(seed, start)))
            if len(outs) != len(part) or any(len(c) != n for c in outs):
                raise RuntimeError(f"generate returned {len(outs)} prompts' completions for {len(part)} prompts "
                                   f"x {n}; a generate callable must return params.n completions per prompt")
            new = [(it, _text(prompt), k, c) for it, prompt, comps in zip(part, prompts, outs)
                   for k, c in enumerate(comps) if (str(it.id), decoding_name, k) not in done]
            graded = _grade(spec, [(it, c.text) for it, _, _, c in new], code_timeout, workers)
            batch = []
            for (it, prompt, k, c), (extracted, correct, status) in zip(new, graded):
                row = {"benchmark": spec.name, "benchmark_version": spec.version, "problem_id": it.id,
                       "decoding": decoding_name, "sample_index": k, "prompt": prompt, "completion": c.text,
                       "extracted": extracted, "gold": it.gold, "correct": correct, "finished": c.finished,
                       "n_tokens": len(c.token_ids)}
                if status is not None:
                    row["status"] = status
                row.update(_row_extras(spec, it))
                batch.append(row)
            if judge is not None and spec.task != "code":
                judge.review(batch, [it for it, _, _, _ in new])
            from corl_bench.results import append_jsonl
            append_jsonl(out_path, batch)
            rows.extend(batch)
            done.update((str(r["problem_id"]), decoding_name, int(r["sample_index"])) for r in batch)
            if progress is not None:
                progress(len(batch))
    keep = {str(it.id) for it in items}
    return score_predictions([r for r in rows if str(r["problem_id"]) in keep], row_grader(spec))


def evaluate_spec(model: Any, tokenizer: Any, spec: BenchmarkSpec, items: Sequence[Item], *, out_path: Path,
                  seed: int = 0, decoding: Decoding | None = None, chunk: int | None = 16, code_timeout: float = 10.0,
                  workers: int = 2, progress: Callable[[int], None] | None = None,
                  backend: str = "fast", engine_kwargs: Mapping[str, Any] | None = None) -> BenchmarkScores:
    """:func:`evaluate` with a rollout engine built for ``model`` (``backend``; ``engine_kwargs`` go to it —
    ``fast``: ``max_batch``, ``grow_cache``) and prompts rendered with ``tokenizer``: the offline entry point."""
    from corl_bench.rollout import make_engine

    engine = make_engine(backend, model, tokenizer, **dict(engine_kwargs or {}))
    return evaluate(engine.generate, spec, items, out_path=out_path, seed=seed, decoding=decoding, chunk=chunk,
                    tokenizer=tokenizer, progress=progress, code_timeout=code_timeout, workers=workers)


def load_scores(out_dir: Path, benchmarks: Mapping[str, Any]) -> dict[str, BenchmarkScores]:
    """Scores of an evaluation phase that already ran (a resumed run does not evaluate its base models twice):
    ``out_dir/<name>.jsonl`` for every benchmark name, graded with its spec."""
    from corl_bench.eval.specs import get_spec
    from corl_bench.results import read_jsonl

    return {name: score_predictions(read_jsonl(Path(out_dir) / f"{name}.jsonl"), row_grader(get_spec(name)))
            for name in benchmarks}


def _grade(spec: BenchmarkSpec, pairs: list[tuple[Any, str]], timeout: float, workers: int
           ) -> list[tuple[Optional[str], bool, Optional[str]]]:
    pre = spec.response_prefix  # the answer as the model wrote it: the prompt's primed opening, then the completion
    if spec.task != "code":
        return [(*grade_text(pre + text, it.gold, spec.extractor, spec.grader, getattr(it, "choices", None)), None)
                for it, text in pairs]
    from corl_bench.eval.codeexec import run_many

    codes = [extract_code(pre + text) for _, text in pairs]
    results = run_many([(code, it.meta) for code, (it, _) in zip(codes, pairs)], timeout=timeout, workers=workers)
    return [(code, passed, status) for code, (passed, status) in zip(codes, results)]


def with_overrides(dec: Decoding, *, samples: int | None = None, max_new_tokens: int | None = None,
                   greedy: bool | None = None, temperature: float | None = None) -> Decoding:
    """The spec's decoding with the command line's overrides (recorded in the eval manifest)."""
    changes = {k: v for k, v in dict(samples=samples, max_new_tokens=max_new_tokens, greedy=greedy,
                                     temperature=temperature).items() if v is not None}
    return replace(dec, **changes)
