"""The footer of a paper-style table: the protocol its numbers were produced under, read from the runs.

Public API (no torch): :func:`footer` ``(metrics, benchmarks, blocks, runs, warnings, ks=None) -> list[str]`` - what
the values are, what the marks rank, evaluation decoding (k, temperature, top-p, max new tokens), benchmark versions
with extractor and grader, prompt templates and chat-template use, the grader's package version, the engine and its
versions (env.json), the checkpoint rule, seeds and where Base came from (settings that differ between runs are
"mixed" and warned about; a benchmark evaluated with fewer samples than its spec asks for is warned about);
:func:`selection_text` (how an ``eval.select`` rule is stated); :func:`spec_info` (a registered benchmark spec, a
BenchmarkSpec; None if unregistered).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Optional, Sequence

from corl_bench.report import methods as method_views
from corl_bench.report.cells import BASE_LABEL, Block
from corl_bench.report.collect import METRIC_LABELS, RunProtocol
from corl_bench.report.methods import UNKNOWN

if TYPE_CHECKING:
    from corl_bench.eval.specs import BenchmarkSpec

logger = logging.getLogger(__name__)

__all__ = ["footer", "selection_text", "spec_info"]


def _decoding_text(decoding: Optional[tuple[tuple[str, Any], ...]]) -> str:
    if decoding is None:
        return "not recorded"
    d = dict(decoding)
    parts = []
    if isinstance(d.get("samples"), str):  # benchmarks of one eval target differ in k
        parts.append(f"k per benchmark ({d['samples']})")
    elif "samples" in d:
        parts.append(f"k={d['samples']} samples")
    if "temperature" in d:
        parts.append(f"temperature {d['temperature']}")
    if "top_p" in d:
        parts.append(f"top-p {d['top_p']}")
    if "greedy" in d:
        parts.append(f"greedy {'yes' if d['greedy'] else 'no'}")
    if "max_new_tokens" in d:
        parts.append(f"max_new_tokens {d['max_new_tokens']}")
    if d.get("max_problems"):
        parts.append(f"first {d['max_problems']} problems")
    return ", ".join(parts) or "not recorded"


def _names(run_ids: Sequence[str], limit: int = 3) -> str:
    run_ids = list(run_ids)
    more = f" and {len(run_ids) - limit} more" if len(run_ids) > limit else ""
    return ", ".join(run_ids[:limit]) + more


def spec_info(bench: str) -> Optional[BenchmarkSpec]:
    """The registered spec of ``bench`` (:class:`corl_bench.eval.specs.BenchmarkSpec`), or None when there is none."""
    try:
        from corl_bench.registries import BENCHMARKS

        if bench not in BENCHMARKS:
            return None
        return BENCHMARKS.get(bench)
    except Exception:  # noqa: BLE001 - a broken registry entry must not break the table
        logger.debug("cannot read the spec of %s", bench, exc_info=True)
        return None


def _unranked_text(blocks: Sequence[Block]) -> str:
    """"Base, GT-Reward (uses labels), Random reward (control) and tagged rows": what the marks skip, from the
    registered methods' kinds (and the unknown methods shown, if any)."""
    refs, controls = method_views.unranked_labels()
    parts = [BASE_LABEL]
    if refs:
        parts.append(f"{', '.join(refs)} (uses labels)")
    if controls:
        parts.append(f"{', '.join(controls)} (control)")
    if any(row.kind == UNKNOWN for b in blocks for row in b.rows):
        parts.append("methods not registered here")
    return ", ".join(parts) + " and tagged rows"


def selection_text(rule: str, benchmark: str) -> str:
    """How a table footer states an ``eval.select`` rule (the test-oracle one in bold: it is optimistic)."""
    if rule == "dev":
        return f"selected on {benchmark} (labelled, disjoint from test)"
    if rule == "label-free":
        return (f"selected label-free by peer agreement on {benchmark} (majority answers, labels unread; phases "
                "before a collapse alarm)")
    if rule == "test-oracle":
        return f"**selected on the test set (test-oracle): optimistic** (best {benchmark} pass@1)"
    return f"selected by {rule} on {benchmark}"


def _checkpoint_lines(runs: Sequence[RunProtocol], warnings: list[str]) -> list[str]:
    """The footer's checkpoint rule: final (steps, mixed or not), or each eval.select rule and its runs; runs that
    stopped early on the collapse alarm are named."""
    lines = []
    final_runs = [r for r in runs if r.selection is None]
    chosen: dict[tuple[str, str], list[str]] = {}
    for r in runs:
        if r.selection is not None:
            chosen.setdefault(r.selection, []).append(r.run_id)
    steps = sorted({r.steps for r in final_runs if r.steps is not None})
    of = f" in {_names([r.run_id for r in final_runs])}" if chosen and final_runs else ""
    if final_runs and len(steps) > 1:
        lines.append(f"Checkpoint: final checkpoint after mixed steps ({', '.join(map(str, steps))}), no selection "
                     f"on test data{of}.")
        warnings.append("runs differ in training steps: " + "; ".join(
            f"{s} steps in {_names([r.run_id for r in final_runs if r.steps == s])}" for s in steps))
    elif final_runs:
        after = f" after {steps[0]} steps" if steps else " (steps not recorded)"
        lines.append(f"Checkpoint: final checkpoint{after}, no selection on test data{of}.")
    for (rule, bench), ids in chosen.items():
        lines.append(f"Checkpoint: {selection_text(rule, bench)}, among the eval.every phases and final, in "
                     f"{_names(ids)}.")
        if rule == "test-oracle":
            warnings.append(f"{_names(ids)} selected their checkpoint on the test set {bench} (eval.select="
                            "test-oracle): their numbers are optimistic")
    stopped = [r for r in runs if r.stopped_after is not None]
    if stopped:
        lines.append("Stopped early by the collapse alarm (run.stop_on_collapse): " + ", ".join(
            f"{r.run_id} after {r.stopped_after} steps" for r in stopped) + ".")
    return lines


def _versions_of(runs: Sequence[RunProtocol], names: Sequence[str]) -> str:
    """"transformers 5.24.0, torch 2.13.0+cpu" from the runs' env.json (several versions joined with "/")."""
    parts = []
    for name in names:
        seen = sorted({v for r in runs for p, v in r.packages if p == name})
        if seen:
            parts.append(f"{name} {'/'.join(seen)}")
    return ", ".join(parts)


def _protocol_lines(benchmarks: Sequence[str], runs: Sequence[RunProtocol], warnings: list[str]) -> list[str]:
    """Prompt template and chat-template use per benchmark (from its registered spec, the version the predictions
    were made with when they agree), grader package versions and the generation engine with its versions."""
    import json

    lines = []
    prompts: dict[tuple[str, bool, bool], list[str]] = {}
    for bench in benchmarks:
        spec = spec_info(bench)
        if spec is not None:
            prompts.setdefault((spec.prompt, bool(spec.chat_template), bool(spec.ask_as_trained)), []).append(bench)
    if prompts:
        lines.append("Prompts: " + "; ".join(
            f"{', '.join(names)}: {json.dumps(prompt, ensure_ascii=False)} (chat template {'yes' if chat else 'no'}"
            + ("; in a training run each agent is asked in its own training format, ask_as_trained" if own else "")
            + ")" for (prompt, chat, own), names in prompts.items()) + ".")
    graders = {spec.grader for spec in map(spec_info, benchmarks) if spec is not None}
    if "math" in graders or any(spec_info(b) is None for b in benchmarks):
        versions = sorted({v for r in runs for p, v in r.packages if p == "math-verify"})
        lines.append("Grading: math answers by math-verify " + ("/".join(versions) if versions else
                                                               "(version not recorded)") +
                     " (the runs' env.json), regraded here from the stored completions.")
        if len(versions) > 1:
            warnings.append(f"runs were made with math-verify {', '.join(versions)}")
    engines: dict[Optional[str], list[str]] = {}
    for r in runs:
        engines.setdefault(r.engine, []).append(r.run_id)
    parts = []
    for engine, ids in engines.items():
        if engine is None:
            parts.append(f"not recorded for {_names(ids)}")
            continue
        mine = [r for r in runs if r.engine == engine]
        packs = _versions_of(mine, ("vllm", "torch") if engine.startswith("vllm") else ("transformers", "torch"))
        parts.append(f"{engine}" + (f" ({packs})" if packs else "") + (f" in {_names(ids)}" if len(engines) > 1
                                                                         else ""))
    if parts:
        lines.append("Engine (rollout.backend, which also generates the evaluations): " + "; ".join(parts) + ".")
    return lines


def _k_warnings(ks: Optional[dict[str, set[int]]], warnings: list[str]) -> None:
    """Warn where the stored predictions have fewer samples per problem than the benchmark's spec asks for (AIME and
    AMC23 ask for 16: the field's avg@k with k >= 16)."""
    for bench, seen in sorted((ks or {}).items()):
        spec = spec_info(bench)
        if spec is None or spec.decoding.samples <= 1 or not seen:
            continue
        if min(seen) < spec.decoding.samples:
            warnings.append(f"{bench}: predictions hold k={min(seen)} sampled completions per problem but its spec "
                            f"asks for {spec.decoding.samples}; avg@k with small k is noisy (re-evaluate with "
                            f"`corl-bench eval ... -b {bench}`)")


def footer(metrics: Sequence[str], benchmarks: Sequence[str], blocks: Sequence[Block], runs: Sequence[RunProtocol],
            warnings: list[str], ks: Optional[dict[str, set[int]]] = None) -> list[str]:
    first = METRIC_LABELS[metrics[0]]
    names = ", ".join(METRIC_LABELS[m] for m in metrics)
    groups = " (one column group per metric)" if len(metrics) > 1 else ""
    lines = [f"Values: {names} in percent{groups}, mean ± sample sd over seeds (n = seeds); "
             f"Avg = mean of {first} over the {len(benchmarks)} benchmark(s); Δ = each run's Avg − its own "
             "base-phase Avg on the same problems, mean over seeds.",
             "Bold = best label-free mean in a column, underline = second (compared at display precision, ties "
             f"share a mark); {_unranked_text(blocks)} are not ranked."]
    used = {rid for b in blocks for row in b.rows for rid in row.run_ids}
    runs = [r for r in runs if r.run_id in used]
    decodings: dict[Optional[tuple[tuple[str, Any], ...]], list[str]] = {}
    for r in runs:
        decodings.setdefault(r.decoding, []).append(r.run_id)
    known = {d: ids for d, ids in decodings.items() if d is not None}
    if len(known) > 1:
        lines.append("Evaluation decoding: mixed (see warnings).")
        warnings.append("runs differ in eval decoding: " + "; ".join(
            f"{_decoding_text(d)} in {_names(ids)}" for d, ids in known.items()))
    else:
        text = _decoding_text(next(iter(known))) if known else "not recorded"
        missing = decodings.get(None, [])
        lines.append(f"Evaluation decoding: {text}" + (f" (not recorded for {_names(missing)})" if missing and known
                                                         else "") + ".")
    bench_parts = []
    for bench in benchmarks:
        versions = sorted({v for r in runs for b, v in r.versions if b == bench})
        spec = spec_info(bench)
        text = bench + (f" v{versions[0]}" if len(versions) == 1 else
                        f" v{', v'.join(versions)} (mixed)" if versions else " (version not recorded)")
        if len(versions) > 1:
            warnings.append(f"{bench}: predictions come from versions {', '.join(versions)} of the benchmark")
        if spec is not None:
            text += f" (extractor {spec.extractor}, grader {spec.grader})"
            current = spec.version
            if versions and any(v != current for v in versions):
                warnings.append(f"{bench}: stored predictions are version {', '.join(versions)} but the registered "
                                f"spec is version {current}; regraded with the current extractor and grader")
        else:
            text += " (not a registered benchmark: default math grading)"
        bench_parts.append(text)
    lines.append("Benchmarks: " + "; ".join(bench_parts) + ".")
    lines += _protocol_lines(benchmarks, runs, warnings)
    _k_warnings(ks, warnings)
    lines += _checkpoint_lines(runs, warnings)
    seeds = sorted({s for b in blocks for row in b.rows for s in row.seeds})
    lines.append(f"Seeds: {', '.join(map(str, seeds))}.")
    unofficial = method_views.unofficial_labels({row.method for b in blocks for row in b.rows})
    if unofficial:
        lines.append(f"† unofficial: {', '.join(unofficial)} implemented from the paper (no public code); "
                     "`corl-bench ls methods` names the source.")
    sources = []
    for b in blocks:
        if b.base_sources:
            sources.append(f"{b.name} from " + ", ".join(f"{rid} (seed {s})" for s, rid in b.base_sources))
    if sources:
        lines.append("Base (base-phase evaluation, per seed from the block's first run in row order): "
                     + "; ".join(sources) + ".")
    return lines
