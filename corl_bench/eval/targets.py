"""``corl-bench eval``: score a run's agents, a checkpoint folder or a named model on benchmark specs.

Targets:

* a run directory (holds ``run.json``): every agent's ``checkpoints/final/<agent>`` (``--phase final``) or its base
  model (``--phase base``: the micro family checkpoint); predictions go to ``<run>/eval/<phase>/<agent>/``, next to
  the micro evaluation, so ``corl-bench table`` shows the new benchmarks as more columns of the same rows;
  ``RUN_DIR:agent`` picks one agent (by name, or by family when exactly one agent has it);
* anything :func:`corl_bench.models.load.load_model` understands (a ``save_pretrained`` folder, ``smol``, a micro
  family): predictions go to ``<out>/eval/final/<name>/`` with a ``run.json`` of method ``base``, so the model
  appears as a Base row in ``corl-bench table``.

Each agent directory keeps ``eval_manifest.json``: per benchmark, its version, the decoding, the sampling seed, the
chunk size and the seed rule (:data:`corl_bench.eval.evaluator.SEED_RULE`). Resuming with any of them changed is
refused (the rows would mix protocols or random streams). Predictions written before the one evaluation path
(seed rule 1: no ``seed_rule`` in the manifest) drew other random numbers; they are refused too, with the fix
(delete them or evaluate into another directory).
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any, Callable, Sequence

from corl_bench.eval.specs import BenchmarkSpec, Decoding, get_spec
from corl_bench.config import ConfigError
from corl_bench.record import AgentEntry, RunRecord
from corl_bench.results import RunDir, atomic_write_text, environment_record, now_iso, write_json

log = logging.getLogger(__name__)
MANIFEST = "eval_manifest.json"


def run_target(target: str) -> tuple[Path, str | None] | None:
    """``(run directory, agent or None)`` when ``target`` is a run directory or ``RUN_DIR:agent``; else None."""
    path = Path(target)
    if RunDir(path).is_run():
        return path, None
    if ":" in target:
        run, agent = target.rsplit(":", 1)
        if agent and RunDir(run).is_run():
            return Path(run), agent
    return None


def select_agents(run: Path, record: RunRecord, agent: str | None) -> list[AgentEntry]:
    """The run's agents, or the one named ``agent`` (an agent name, or a family only one agent has)."""
    agents = list(record.agents or ())
    if agent is None:
        return agents
    exact = [a for a in agents if a.name == agent]
    by_family = [a for a in agents if a.family == agent]
    if exact or len(by_family) == 1:
        return exact or by_family
    names = ", ".join(a.name for a in agents)
    if by_family:
        raise ConfigError(f"{run}: {len(by_family)} agents have family {agent} ({names}); name one: {run}:<agent>")
    raise ConfigError(f"{run} has no agent {agent!r}; its agents: {names}")


def targets(target: str, phase: str, out: Path | None) -> list[tuple[str, str, Path]]:
    """(agent name, model reference, predictions dir) for every model to evaluate."""
    path = Path(target)
    run = run_target(target)
    if run is not None:
        path, rd = run[0], RunDir(run[0])
        found = []
        for agent in select_agents(path, rd.record(), run[1]):
            ref = str(rd.final_checkpoint(agent.name)) if phase == "final" else str(agent.family)
            if phase == "final" and not Path(ref).is_dir():
                raise ConfigError(f"{path}: agent {agent.name} has no final checkpoint ({ref}); was the run "
                                  "finished with run.save_checkpoints?")
            found.append((agent.name, ref, rd.eval_dir(phase, agent.name)))
        return found
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", path.name if path.exists() else target).strip("-") or "model"
    root = out or Path("results") / "evals" / name
    return [(name, target, RunDir(root).eval_dir("final", name))]


def _write_base_run(root: Path, name: str, ref: str, seed: int) -> None:
    """A run.json that makes a stand-alone evaluation a Base row of ``corl-bench table``."""
    info_path = root / "run.json"
    if info_path.is_file():
        return
    write_json(root / "env.json", environment_record(seed))
    RunDir(root).write_record(RunRecord(run_id=root.name, method="base", cohort="eval", profile="pretrained",
                                        seed=seed, status="finished", started_at=now_iso(), model=ref,
                                        agents=(AgentEntry(name, ref),), phases=("final",)))


def check_manifest(agent_dir: Path, spec: BenchmarkSpec, dec: Decoding, model: str, engine: str, *,
                   seed: int | None = None, chunk: int | None = None, judge: str | None = None,
                   max_image_side: int = 0) -> None:
    """Record the protocol of ``<agent_dir>/<benchmark>.jsonl`` in ``eval_manifest.json``; a one-line ConfigError
    when predictions already there were made under another one. Our engine (resumable: new rows join old ones)
    also records the seed rule, and ``seed`` and ``chunk`` when given (they decide every chunk's random numbers).
    With no predictions in the file (deleted, or never written) the old entry is simply replaced. ``judge``: the LLM
    judge's model (recorded only when one is used; adding or dropping it is a change of protocol); ``max_image_side``
    likewise (recorded when images are capped)."""
    from corl_bench.eval.evaluator import SEED_RULE
    from corl_bench.results import read_complete_rows

    path = agent_dir / MANIFEST
    manifest = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    entry = {"version": spec.version, "decoding": json.loads(json.dumps(dec.__dict__, default=list)),
             "prompt": spec.prompt, "chat_template": spec.chat_template, "extractor": spec.extractor,
             "grader": spec.grader, "engine": engine, "model": model}
    if engine == "ours":
        entry["seed_rule"] = SEED_RULE
        entry.update({k: v for k, v in (("seed", seed), ("chunk", chunk)) if v is not None})
    if judge:
        entry["judge"] = judge
    if max_image_side:
        entry["max_image_side"] = max_image_side
    old = manifest.get(spec.name)
    preds = agent_dir / (spec.name + ".jsonl")
    if old is not None and read_complete_rows(preds)[0]:
        if old.get("engine") == engine == "ours" and old.get("seed_rule") != entry["seed_rule"]:
            raise ConfigError(f"{preds} was made with sampling-seed rule {old.get('seed_rule', 1)}, this version uses "
                              f"rule {SEED_RULE} (other random numbers); delete those predictions or evaluate into "
                              "another directory (--out)")
        changed = sorted({k for k in entry if k != "model" and old.get(k) != entry[k]} |
                         {k for k in ("judge", "max_image_side") if old.get(k) != entry.get(k)})
        if changed:
            was = ", ".join(f"{k}={old.get(k)!r}" for k in changed if k in ("seed", "chunk"))
            raise ConfigError(f"{preds} was made with a different {', '.join(changed)}{f' ({was})' if was else ''}; "
                              "evaluate into another directory (--out), delete those predictions, or resume with "
                              "the same options")
    manifest[spec.name] = entry
    agent_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def _generated_items(spec: Any) -> list[Any]:
    """The items of a profile's generated suite that the spec's template renders (the hf profile's arithmetic); a
    one-line ConfigError for a suite whose items are asked in an agent's view (the micro profile's), which only a
    training run evaluates."""
    from corl_bench.registries import PROFILES

    items = list(PROFILES.get(spec.profile)().benchmark(spec.name))
    if any(callable(getattr(it, "prompt", None)) for it in items[:1]):
        raise ConfigError(f"{spec.name}: {spec.profile}-profile suites are evaluated by `corl-bench run`; pick data "
                          "benchmarks or generated suites of the hf profile (corl-bench ls benchmarks)")
    return items


def run_eval(target: str, benchmarks: Sequence[str], *, data_dir: str | None = None, phase: str = "final",
             out: Path | None = None, seed: int = 0, max_problems: int | None = None,
             overrides: dict[str, Any] | None = None, engine: str = "ours", code_timeout: float = 10.0,
             workers: int = 2, chunk: int = 32, report: Callable[[str], None] = log.info, judge: str | None = None,
             extractor: str | None = None, max_image_side: int = 0, items_file: Path | None = None,
             prompt: str = "paper") -> dict[str, dict[str, Any]]:
    """Evaluate every target model on every benchmark; returns agent -> benchmark -> scores (as dicts).

    ``items_file``: a JSON object ``{benchmark: [problem ids]}`` (a fixed, e.g. seeded, subset; :func:`read_items`):
    each benchmark is evaluated on those problems only, in the benchmark's order (``max_problems`` then cuts that
    list). ``prompt``: ``paper`` (the spec's prompt) or ``native`` (the model's own format,
    :mod:`corl_bench.eval.native`: chosen by whether the model's tokenizer has a chat template; recorded in the
    manifest and the rows' benchmark version).

    ``judge``: a causal LM (folder or cached hub id) that re-checks the answers the rules marked wrong
    (:mod:`corl_bench.eval.judge`; off by default; checked before anything is loaded). ``extractor``: another
    extractor for the image benchmarks (``answer_tag``: the paper's training format), recorded in the manifest and in
    every row. Image benchmarks generate with the ``hf`` engine (the one with image input); a spec with ``we-math``
    in its metrics also reports the We-Math four-dimensional metrics (:mod:`corl_bench.eval.wemath`).

    ``max_image_side``: a vision-language model's images are downscaled to that longer side first (the paper's VLM
    protocol: 1024; recorded in the manifest).

    ``engine``: ``ours``, ``lm-eval`` (text benchmarks: :mod:`corl_bench.eval.lmeval_bridge`) or ``vlmevalkit``
    (image benchmarks: :mod:`corl_bench.eval.vlmevalkit_bridge`; VLMEvalKit's own datasets, prompts and generation
    settings, so ``data_dir``, ``max_problems``, the decoding overrides, ``judge`` and ``extractor`` do not apply; its
    rows are ours, graded by the spec, and a re-run generates only the benchmarks without predictions)."""
    import dataclasses

    from corl_bench.eval.data import load_rows
    from corl_bench.eval.evaluator import evaluate, with_overrides
    from corl_bench.eval.items import build_items
    from corl_bench.models.load import load_model
    from corl_bench.rollout import make_engine

    from corl_bench.eval.native import PROMPTS, native_spec, style_of

    if prompt not in PROMPTS:
        raise ConfigError(f"--prompt must be one of {', '.join(PROMPTS)} (got {prompt!r})")
    if prompt == "native" and engine != "ours":
        raise ConfigError("--prompt native renders its prompts with our engine; drop --engine or use --prompt paper")
    if phase not in ("final", "base"):
        raise ConfigError(f"--phase must be final or base (got {phase!r})")
    if max_image_side < 0:
        raise ConfigError(f"--max-image-side must be >= 0 (got {max_image_side}); 0 = no cap, e.g. 1024")
    if engine not in ("ours", "lm-eval", "vlmevalkit"):
        raise ConfigError(f"--engine must be ours, lm-eval or vlmevalkit (got {engine!r})")
    specs = [get_spec(b) for b in benchmarks]
    generated = {s.name: _generated_items(s) for s in specs if s.profile}  # refused here unless the spec renders them
    if extractor is not None:
        from corl_bench.registries import EXTRACTORS

        if extractor not in EXTRACTORS or EXTRACTORS.primary(extractor) == "code":
            raise ConfigError(f"--extractor {extractor!r} is unknown; valid: "
                              f"{', '.join(e for e in EXTRACTORS.names() if e != 'code')}")
        text = [s.name for s in specs if s.modality != "image"]
        if text:
            raise ConfigError(f"--extractor applies to image benchmarks only (their rows record it); evaluate "
                              f"{', '.join(text)} in a separate call, with their spec's extractor")
        specs = [dataclasses.replace(s, extractor=EXTRACTORS.primary(extractor)) for s in specs]
    images = [s.name for s in specs if s.modality == "image"]
    if images and engine == "lm-eval":
        raise ConfigError(f"{', '.join(images)}: the lm-eval bridge renders text prompts only; evaluate image "
                          "benchmarks with --engine ours (or --engine vlmevalkit)")
    if engine == "vlmevalkit":
        _check_vlmevalkit(specs, data_dir=data_dir, max_problems=max_problems, judge=judge, extractor=extractor,
                          max_image_side=max_image_side or None,
                          **(overrides or {}))
    judge_model = None
    if judge:
        from corl_bench.eval.judge import Judge

        code = [s.name for s in specs if s.task == "code"]
        if code:
            raise ConfigError(f"--judge: {', '.join(code)} are graded by their tests; drop them or the judge")
        judge_model = Judge(judge)  # an absent judge model fails here, before any data or model is loaded
    if prompt == "native":
        for spec in specs:  # refused here (no native prompt for it) before anything is loaded
            native_spec(spec, "chat"), native_spec(spec, "completion")
    subset = read_items(items_file, [s.name for s in specs]) if items_file is not None else None
    data = {}
    own_data = specs if engine != "vlmevalkit" else []  # VLMEvalKit reads its own copies of the data
    for spec in own_data:  # load (and validate) all data before any model is loaded or anything is written
        items = generated[spec.name] if spec.profile else build_items(spec, load_rows(spec, data_dir))
        if subset is not None:
            items = _subset(spec.name, items, subset[spec.name], items_file)
        data[spec.name] = items[:max_problems] if max_problems else items
    found = targets(target, phase, out)
    bridged = {ref: _vlmevalkit_model(ref) for _, ref, _ in found} if engine == "vlmevalkit" else {}
    results: dict[str, dict[str, Any]] = {}
    for name, ref, agent_dir in found:
        if run_target(target) is None:
            _write_base_run(agent_dir.parent.parent.parent, name, ref, seed)
        if engine == "vlmevalkit":
            results[name] = _run_vlmevalkit(name, ref, bridged[ref], specs, agent_dir, report)
            continue
        model, tok = load_model(ref, max_image_side=max_image_side)
        engines: dict[str, Any] = {}
        asked = [native_spec(s, style_of(tok)) for s in specs] if prompt == "native" else specs
        for spec in asked:
            dec = with_overrides(spec.decoding, **(overrides or {}))
            if not dec.samples and not dec.greedy:
                raise ConfigError(f"{spec.name}: --samples 0 without greedy decoding evaluates nothing; add --greedy")
            check_manifest(agent_dir, spec, dec, ref, engine, seed=seed, chunk=chunk, judge=judge,
                           max_image_side=max_image_side if spec.modality == "image" else 0)
            backend = "hf" if spec.modality == "image" else "fast"
            if engine == "ours" and backend not in engines:
                engines[backend] = make_engine(backend, model, tok)
            generate = engines[backend].generate if engine == "ours" else None
            items = data[spec.name]
            path = agent_dir / f"{spec.name}.jsonl"
            if engine == "lm-eval":
                from corl_bench.eval.lmeval_bridge import evaluate_with_lm_eval
                scores = evaluate_with_lm_eval(model, tok, spec, items, out_path=path, decoding=dec, seed=seed)
            else:
                scores = evaluate(generate, spec, items, out_path=path, seed=seed, decoding=dec, chunk=chunk,
                                  tokenizer=tok, code_timeout=code_timeout, workers=workers, judge=judge_model)
            results.setdefault(name, {})[spec.name] = _scored(name, spec, scores, path, {it.id for it in items},
                                                              report)
    return results


def read_items(path: Path, benchmarks: Sequence[str]) -> dict[str, list[str]]:
    """``{benchmark: [ids]}`` from ``path`` (JSON); a one-line ConfigError for a bad file or a benchmark it lacks."""
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ConfigError(f"--items {path}: not a readable JSON file ({type(e).__name__}); write "
                          '{"gsm8k": ["id", ...], ...}') from None
    if not isinstance(raw, dict) or not all(isinstance(v, list) for v in raw.values()):
        raise ConfigError(f'--items {path}: expected a JSON object of id lists, e.g. {{"gsm8k": ["gsm8k_12", ...]}}')
    missing = [b for b in benchmarks if b not in raw]
    if missing:
        raise ConfigError(f"--items {path} lists no ids for {', '.join(missing)}; add them or evaluate those "
                          "benchmarks without --items")
    return {b: [str(i) for i in raw[b]] for b in benchmarks}


def _subset(name: str, items: list[Any], ids: list[str], path: Path | None) -> list[Any]:
    """The items whose ids are listed, in the benchmark's order; every listed id must exist (once)."""
    wanted = set(ids)
    if len(wanted) != len(ids):
        raise ConfigError(f"--items {path}: {name} lists an id twice; list each problem once")
    unknown = sorted(wanted - {str(it.id) for it in items})
    if unknown:
        raise ConfigError(f"--items {path}: {name} has no problem {unknown[0]!r} ({len(unknown)} unknown id(s)); "
                          "check the ids against the benchmark's data")
    return [it for it in items if str(it.id) in wanted]


def _scored(name: str, spec: BenchmarkSpec, scores: Any, path: Path, ids: set[str],
            report: Callable[[str], None]) -> dict[str, Any]:
    """One benchmark's result (scores, the avg@k interval, We-Math's metrics where the spec asks) and its lines."""
    lo, hi = avg_ci(path, spec, ids)
    result = {**scores.__dict__, "avg_k_ci95": [lo, hi]}
    if "we-math" in spec.metrics:
        from corl_bench.eval.wemath import describe, metrics_from_file

        result["we_math"] = four_d = metrics_from_file(path, spec, ids)
        report(f"{name} {spec.key}: {describe(four_d)}")
    report(f"{name} {spec.key}: n={scores.n_problems} k={scores.k} avg@k={_pct(scores.avg_k)} "
           f"[95% CI {_pct(lo)}-{_pct(hi)}] "
           f"greedy={_pct(scores.greedy)} maj@k={_pct(scores.maj_k)} pass@k={_pct(scores.pass_k)} "
           f"no-answer={_pct(scores.extraction_failure)} clipped={_pct(scores.clipped)}")
    return result


def _check_vlmevalkit(specs: Sequence[BenchmarkSpec], **options: Any) -> None:
    """``--engine vlmevalkit``: image benchmarks with a VLMEvalKit counterpart, no option it ignores, VLMEvalKit
    importable; one-line ConfigErrors, before anything is loaded."""
    from corl_bench.eval.vlmevalkit_bridge import dataset_name, require_vlmeval

    text = [s.name for s in specs if s.modality != "image"]
    if text:
        raise ConfigError(f"{', '.join(text)}: --engine vlmevalkit scores image benchmarks only; evaluate these with "
                          "--engine ours (or lm-eval) in a separate call")
    for spec in specs:
        dataset_name(spec)
    given = [f"--{k.replace('_', '-')}" for k, v in options.items() if v is not None]
    if given:
        raise ConfigError(f"--engine vlmevalkit generates with VLMEvalKit's own datasets and settings; drop "
                          f"{', '.join(given)} (or use --engine ours)")
    require_vlmeval()


def _vlmevalkit_model(ref: str) -> tuple[Path, str, dict[str, Any]]:
    """(checkpoint folder, ``vlmeval.vlm`` class, its arguments) of a target; a one-line ConfigError for a target
    VLMEvalKit cannot load (a micro family, a text model entry, a model type the bridge does not map)."""
    from corl_bench.eval.vlmevalkit_bridge import model_class
    from corl_bench.models.load import default_cache_root, kind, model_folder

    if kind(ref) in ("family", "entry"):
        raise ConfigError(f"--engine vlmevalkit loads vision-language checkpoint folders; {ref!r} is a "
                          f"{'micro family' if kind(ref) == 'family' else 'text model entry'} (use --engine ours)")
    folder = model_folder(ref, default_cache_root())
    return (folder, *model_class(folder))


def _run_vlmevalkit(name: str, ref: str, model: tuple[Path, str, dict[str, Any]], specs: Sequence[BenchmarkSpec],
                    agent_dir: Path, report: Callable[[str], None]) -> dict[str, Any]:
    """Generate with VLMEvalKit the benchmarks ``agent_dir`` has no predictions of (its work files under
    ``agent_dir/vlmevalkit/``), then score every benchmark from its rows."""
    from corl_bench.eval.evaluator import load_scores
    from corl_bench.eval.vlmevalkit_bridge import model_path, run_vlmevalkit
    from corl_bench.results import read_complete_rows, read_jsonl

    for spec in specs:
        check_manifest(agent_dir, spec, spec.decoding, ref, "vlmevalkit")
    missing = [s.name for s in specs if not read_complete_rows(agent_dir / f"{s.name}.jsonl")[0]]
    if missing:
        folder, cls, kwargs = model
        work = agent_dir / "vlmevalkit"
        run_vlmevalkit(cls, model_path(folder, work), missing, work, out_dir=agent_dir, model_name=name,
                       model_kwargs=kwargs)
    scores = load_scores(agent_dir, [s.name for s in specs])
    out = {}
    for spec in specs:
        path = agent_dir / f"{spec.name}.jsonl"
        ids = {str(r["problem_id"]) for r in read_jsonl(path)}
        out[spec.name] = _scored(name, spec, scores[spec.name], path, ids, report)
    return out


def avg_ci(path: Path, spec: BenchmarkSpec, ids: set[str]) -> tuple[float | None, float | None]:
    """Bootstrap 95 % interval of avg@k over problems (each problem's mean over its samples), from the rows."""
    from corl_bench.eval.evaluator import row_grader
    from corl_bench.eval.metrics import bootstrap_ci
    from corl_bench.results import read_jsonl

    grade = row_grader(spec)
    per: dict[str, list[float]] = {}
    for row in read_jsonl(path):
        if str(row["problem_id"]) in ids and row["decoding"] == "sampled":
            per.setdefault(str(row["problem_id"]), []).append(float(grade(row)[1]))
    if not per:
        return None, None
    return bootstrap_ci([sum(v) / len(v) for v in per.values()])


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"
