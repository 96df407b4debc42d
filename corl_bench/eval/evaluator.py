"""Evaluate a model on a benchmark spec: resumable per-sample predictions first, scores recomputed from them.

One row per (problem, decoding, sample index) goes to ``<out>/<benchmark>.jsonl``::

    {"benchmark", "benchmark_version", "problem_id", "decoding", "sample_index", "prompt", "completion",
     "extracted", "gold", "correct", "finished", "n_tokens", "status"?}

Rows are appended in complete lines after every chunk of problems, so an interrupted evaluation keeps what it
finished, and a re-run generates only the (problem, decoding, sample) keys that are missing. Predictions made under
another version of the benchmark are refused (delete them or write elsewhere), never mixed.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

from corl_bench.eval.items import Item, render
from corl_bench.eval.specs import BenchmarkSpec, Decoding
from corl_bench.config import ConfigError
from corl_bench.eval.metrics import BenchmarkScores, score_predictions
from corl_bench.results import append_jsonl
from corl_bench.eval.scoring import extract_code, grade_text

log = logging.getLogger(__name__)
Key = tuple[str, str, int]


def row_grader(spec: BenchmarkSpec) -> Callable[[Mapping[str, Any]], tuple[Optional[str], bool]]:
    """How ``corl-bench table`` re-grades a stored row of this benchmark: the spec's extractor and grader on the
    completion; for code, the stored execution result (re-running every program is what ``eval`` does)."""
    if spec.task == "code":
        return lambda row: (row.get("extracted"), bool(row.get("correct")))
    return lambda row: grade_text(str(row.get("completion") or ""), str(row["gold"]), spec.extractor, spec.grader)


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


def _chunks(seq: Sequence[Any], n: int) -> list[Sequence[Any]]:
    return [seq[i: i + n] for i in range(0, len(seq), n)]


def evaluate_spec(model: Any, tokenizer: Any, spec: BenchmarkSpec, items: Sequence[Item], *, out_path: Path,
                  seed: int = 0, decoding: Decoding | None = None, chunk: int = 16, code_timeout: float = 10.0,
                  workers: int = 2, progress: Callable[[int], None] | None = None,
                  backend: str = "fast", engine_kwargs: Mapping[str, Any] | None = None) -> BenchmarkScores:
    """Generate what is missing, grade it, append it; return the scores of everything in ``out_path``.
    ``engine_kwargs`` go to the rollout backend (``fast``: ``max_batch``, ``grow_cache``)."""
    from corl_bench.rollout import SamplingParams, make_engine

    dec = decoding or spec.decoding
    engine = make_engine(backend, model, tokenizer, **dict(engine_kwargs or {}))
    rows = _existing(out_path, spec)
    done: set[Key] = {(str(r["problem_id"]), r["decoding"], int(r["sample_index"])) for r in rows}
    plan: list[tuple[str, int]] = ([("greedy", 1)] if dec.greedy else []) + \
                                  ([("sampled", dec.samples)] if dec.samples else [])
    for decoding_name, n in plan:
        todo = [it for it in items if any((it.id, decoding_name, k) not in done for k in range(n))]
        for ci, part in enumerate(_chunks(todo, chunk)):
            prompts = [render(spec, it, tokenizer) for it in part]
            params = SamplingParams(n=n, greedy=decoding_name == "greedy",
                                    temperature=dec.temperature if decoding_name == "sampled" else 1.0,
                                    top_p=dec.top_p if decoding_name == "sampled" else 1.0,
                                    max_new_tokens=dec.max_new_tokens, stop=tuple(dec.stop), logprobs=False,
                                    seed=(seed * 1_000_003 + hash_id(part[0].id)) % (2**31))
            outs = engine.generate(prompts, params)
            new = []
            for it, prompt, comps in zip(part, prompts, outs):
                for k, c in enumerate(comps):
                    if (it.id, decoding_name, k) in done:
                        continue
                    new.append((it, prompt, k, c))
            graded = _grade(spec, [(it, c.text) for it, _, _, c in new], code_timeout, workers)
            batch = []
            for (it, prompt, k, c), (extracted, correct, status) in zip(new, graded):
                row = {"benchmark": spec.name, "benchmark_version": spec.version, "problem_id": it.id,
                       "decoding": decoding_name, "sample_index": k, "prompt": prompt, "completion": c.text,
                       "extracted": extracted, "gold": it.gold, "correct": correct, "finished": c.finished,
                       "n_tokens": len(c.token_ids)}
                if status is not None:
                    row["status"] = status
                batch.append(row)
            append_jsonl(out_path, batch)
            rows.extend(batch)
            if progress is not None:
                progress(len(batch))
    keep = {it.id for it in items}
    return score_predictions([r for r in rows if str(r["problem_id"]) in keep], row_grader(spec))


def hash_id(text: str) -> int:
    """A stable (process-independent) integer of a problem id, for per-chunk sampling seeds."""
    import zlib
    return zlib.crc32(text.encode("utf-8"))


def _grade(spec: BenchmarkSpec, pairs: list[tuple[Item, str]], timeout: float, workers: int
           ) -> list[tuple[Optional[str], bool, Optional[str]]]:
    if spec.task != "code":
        return [(*grade_text(text, it.gold, spec.extractor, spec.grader), None) for it, text in pairs]
    from corl_bench.eval.codeexec import run_many

    codes = [extract_code(text) for _, text in pairs]
    results = run_many([(code, it.meta) for code, (it, _) in zip(codes, pairs)], timeout=timeout, workers=workers)
    return [(code, passed, status) for code, (passed, status) in zip(codes, results)]


def with_overrides(dec: Decoding, *, samples: int | None = None, max_new_tokens: int | None = None,
                   greedy: bool | None = None, temperature: float | None = None) -> Decoding:
    """The spec's decoding with the command line's overrides (recorded in the eval manifest)."""
    changes = {k: v for k, v in dict(samples=samples, max_new_tokens=max_new_tokens, greedy=greedy,
                                     temperature=temperature).items() if v is not None}
    return replace(dec, **changes)
