"""``corl-bench probe`` and ``corl-bench ensemble``: model references -> predictions -> the pure statistics of
:mod:`corl_bench.report.overlap` and :mod:`corl_bench.report.controls` -> tables and atomically written reports.

Probe models (``MODEL`` as ``corl-bench eval`` takes it, plus a seed suffix):

* a micro family (``qwen2-bpe``), ``smol``, a ``save_pretrained`` folder;
* a run directory (every agent; ``--phase base`` = its pre-RL model, the default) or ``RUN_DIR:agent``; a run's
  agent samples with ``--seed`` plus its cohort ``seed_offset``, so a same-family run is a seed-only pair;
* ``MODEL@SEED``: the same model sampled with another seed (the paper's "seed only" pair; default seed ``--seed``).

Generated predictions go to ``<out>/predictions/<model>/<benchmark>.jsonl`` through the spec evaluator, so a re-run
with the same ``--out`` generates only what is missing (and never loads a model whose predictions are complete).

``--from-predictions`` (and ``ensemble``) read stored predictions instead: a ``.jsonl`` file, a folder holding
``<benchmark>.jsonl``, or a run directory / ``RUN_DIR:agent`` (its ``eval/<phase>/<agent>/<benchmark>.jsonl``).
"""

from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from corl_bench.eval.specs import BenchmarkSpec, Decoding, get_spec
from corl_bench.config import ConfigError
from corl_bench.report.overlap import DEFINITIONS, Equivalence, Outcome, Overlap, markdown, outcomes_from_rows, pct, \
    probe_pairs
from corl_bench.results import EVAL_MANIFEST, RunDir, atomic_write_text, now_iso, read_jsonl, write_json

log = logging.getLogger(__name__)
IDENTITY = "probe_model.json"
_SEED = re.compile(r"(.+)@(\d+)")


@dataclass(frozen=True)
class ProbeModel:
    """One model to probe: its label in tables, what :func:`corl_bench.models.load.load_model` takes, its seed."""

    label: str
    ref: str
    seed: int
    dirname: str


@dataclass(frozen=True)
class PredictionSource:
    """A stored predictions file and the label it gets in tables."""

    label: str
    path: Path


@dataclass(frozen=True)
class ProbeReport:
    """What probe.json holds: benchmark, protocol, models (label, source, accuracy) and every pair."""

    benchmark: str
    protocol: dict[str, Any]
    models: list[dict[str, Any]]
    pairs: list[Overlap]
    out: Path
    created_at: str = field(default_factory=now_iso)


def _dirname(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.@-]+", "-", label).strip("-") or "model"


def _unique(entries: list[tuple[str, str, Any]], hint: str = "") -> list[tuple[str, Any]]:
    """(short, long, value) -> (label, value): the short label unless two entries share it, then the long one."""
    shorts = [s for s, _, _ in entries]
    out = [(s if shorts.count(s) == 1 else lg, v) for s, lg, v in entries]
    labels = [lab for lab, _ in out]
    dup = sorted({lab for lab in labels if labels.count(lab) > 1})
    if dup:
        raise ConfigError(f"{dup[0]} is given twice; probe distinct models" + (hint.format(dup[0]) if hint else ""))
    return out


def resolve_models(args: Sequence[str], *, phase: str = "base", seed: int = 0) -> list[ProbeModel]:
    """Probe models from command-line references (see the module docstring); nothing is loaded."""
    from corl_bench.eval.targets import run_target, targets

    entries: list[tuple[str, str, Any]] = []
    for arg in args:
        base, s = arg, seed
        m = _SEED.fullmatch(arg)
        if m and not Path(arg).exists():
            base, s = m.group(1), int(m.group(2))
        suffix = f"@{s}" if m and not Path(arg).exists() else ""
        run = run_target(base)
        offsets = _seed_offsets(run[0]) if run else {}
        for name, ref, _ in targets(base, phase, None):
            _check_ref(ref)
            long = f"{run[0].name}:{name}" if run else ref
            entries.append((name + suffix, long + suffix, (ref, s + offsets.get(name, 0))))
    resolved = [ProbeModel(label, ref, s, _dirname(label))
                for label, (ref, s) in _unique(entries, " (a seed-only pair is {0} and {0}@1)")]
    seen: dict[tuple[str, int], str] = {}
    for m in resolved:
        twin = seen.setdefault((m.ref, m.seed), m.label)
        if twin != m.label:
            raise ConfigError(f"{twin} and {m.label} are the same model with the same seed; give the partner "
                              f"another seed ({m.label}@{m.seed + 1})")
    return resolved


def _seed_offsets(run: Path) -> dict[str, int]:
    """agent name -> its cohort ``seed_offset`` (config.yaml), so a run's agents keep their distinct sampling seeds."""
    rd = RunDir(run)
    if not rd.config_path.is_file():
        return {}
    agents = (rd.config().get("cohort") or {}).get("agents") or []
    return {str(a["name"]): int(a.get("seed_offset") or 0) for a in agents if isinstance(a, dict) and "name" in a}


def _check_ref(ref: str) -> None:
    """Fail before anything is generated when a model reference cannot be loaded by name."""
    from corl_bench.models.entries import ENTRIES
    from corl_bench.registries import FAMILIES

    if ref not in ENTRIES and not Path(ref).exists() and ref not in FAMILIES:
        raise ConfigError(f"model {ref!r} is not a folder, a run directory (RUN_DIR or RUN_DIR:agent), a model "
                          f"entry ({', '.join(ENTRIES)}) or a micro family ({', '.join(FAMILIES.names())})")


def prediction_sources(args: Sequence[str], *, phase: str, benchmark: str) -> list[PredictionSource]:
    """Stored predictions of each argument: a .jsonl file, a folder holding ``<benchmark>.jsonl``, a run (every
    agent) or ``RUN_DIR:agent``. Labels are agent (or folder) names, prefixed by the run where two would clash."""
    found = [entry for arg in args for entry in _sources(arg, phase, benchmark)]
    return [PredictionSource(label, path) for label, path in _unique(found)]


def _sources(arg: str, phase: str, benchmark: str) -> list[tuple[str, str, Path]]:
    from corl_bench.eval.targets import run_target, select_agents

    if _SEED.fullmatch(arg) and not Path(arg).exists():
        raise ConfigError(f"{arg}: a MODEL@SEED pair needs generation; drop --from-predictions")
    run = run_target(arg)
    if run is not None:
        rd = RunDir(run[0])
        found = []
        for agent in select_agents(run[0], rd.record(), run[1]):
            path = rd.predictions_path(phase, agent.name, benchmark)
            if not path.is_file():
                raise ConfigError(f"{path} does not exist; was {benchmark} evaluated in the {phase} phase of "
                                  f"{run[0]}? (--phase base|final, --benchmark)")
            found.append((agent.name, f"{run[0].name}:{agent.name}", path))
        return found
    path = Path(arg)
    if path.is_dir() and (path / f"{benchmark}.jsonl").is_file():
        return [(path.name, str(path), path / f"{benchmark}.jsonl")]
    if path.is_file():
        short = path.parent.name if path.name == f"{benchmark}.jsonl" else path.stem
        return [(short, str(path), path)]
    raise ConfigError(f"{arg}: not a predictions file, a folder with {benchmark}.jsonl, or a run directory "
                      "(RUN_DIR or RUN_DIR:agent)")


def recorded_decoding(path: Path, benchmark: str) -> Optional[dict[str, Any]]:
    """The decoding a predictions file was made with, where recorded (its eval manifest, else the run's
    config.yaml ``eval`` section); None if unknown."""
    manifest = path.parent / EVAL_MANIFEST  # predictions of a run or of `corl-bench eval`: eval/<phase>/<agent>/
    if manifest.is_file():
        entry = json.loads(manifest.read_text(encoding="utf-8")).get(benchmark)
        if entry and entry.get("decoding"):
            return dict(entry["decoding"])
    for parent in path.parents[:4]:
        run = RunDir(parent)
        if run.is_run() and run.config_path.is_file():
            ev = run.config().get("eval") or {}
            return {k: ev[k] for k in ("greedy", "samples", "temperature", "max_new_tokens") if k in ev}
    return None


def equivalence_for(spec: BenchmarkSpec) -> Equivalence | None:
    """How two wrong answers of this benchmark are compared for w (None for code: programs are not compared)."""
    from corl_bench.registries import GRADERS
    from corl_bench.grading.verifier import is_equivalent

    if spec.grader == "tests":
        return None
    # two predictions are compared as answers, without the evaluation grader's percent rule (0.05 vs 5 differ)
    return is_equivalent if spec.grader == "math" else GRADERS.get(spec.grader)


def _rows(path: Path, spec: BenchmarkSpec) -> list[dict[str, Any]]:
    rows = read_jsonl(path, ConfigError)
    names = sorted({str(r.get("benchmark")) for r in rows if r.get("benchmark") is not None})
    if names and names != [spec.name]:
        raise ConfigError(f"{path} holds predictions of {', '.join(names)}, not {spec.name}; pass --benchmark "
                          f"{names[0]}")
    versions = sorted({str(r.get("benchmark_version")) for r in rows if r.get("benchmark_version") is not None})
    if versions and versions != [spec.version]:
        raise ConfigError(f"{path} was made with {spec.name} version {', '.join(versions)}, the spec is "
                          f"{spec.version}; compare predictions of the current version")
    return rows


def _draws(rows: list[dict[str, Any]], spec: BenchmarkSpec, *, greedy: bool, samples: int, name: str,
           keep: set[str] | None = None) -> list[dict[str, Outcome]]:
    from corl_bench.eval.evaluator import row_grader

    if keep is not None:
        rows = [r for r in rows if str(r.get("problem_id")) in keep]
    grade = row_grader(spec)
    if greedy:
        return [outcomes_from_rows(rows, decoding="greedy", grade_row=grade, name=name)]
    return [outcomes_from_rows(rows, decoding="sampled", sample_index=i, grade_row=grade, name=name)
            for i in range(samples)]


def _model_entry(label: str, draws: list[dict[str, Outcome]], **extra: Any) -> dict[str, Any]:
    acc = sum(sum(c for _, c in d.values()) / len(d) for d in draws) / len(draws)
    return {"label": label, **extra, "n": len(draws[0]), "accuracy": acc}


def probe_from_predictions(args: Sequence[str], benchmark: str, *, phase: str = "base", greedy: bool = False,
                           samples: int = 1, max_problems: int | None = None, out: Path | None = None) -> ProbeReport:
    """The probe over stored predictions (sample ``0..samples-1`` of the sampled decoding, or the greedy one)."""
    spec = get_spec(benchmark)
    if samples < 1:
        raise ConfigError(f"--samples must be >= 1 (got {samples})")
    found = [(s.label, s.path) for s in prediction_sources(args, phase=phase, benchmark=spec.name)]
    if len(found) < 2:
        raise ConfigError("the probe needs at least two models (a run directory gives all its agents)")
    models, entries = {}, []
    keep: set[str] | None = None
    for label, path in found:
        rows = _rows(path, spec)
        if max_problems and keep is None:  # the first model's first N problems, for every model
            keep = set(list(dict.fromkeys(str(r["problem_id"]) for r in rows))[:max_problems])
        models[label] = _draws(rows, spec, greedy=greedy, samples=samples, name=str(path), keep=keep)
        entries.append(_model_entry(label, models[label], source=str(path),
                                    decoding=recorded_decoding(path, spec.name)))
    pairs = probe_pairs(models, equivalent=equivalence_for(spec))
    protocol = {"source": "stored predictions", "phase": phase, "decoding": "greedy" if greedy else "sampled",
                "draws": 1 if greedy else samples,
                "sample_indices": [0] if greedy else list(range(samples)), "max_problems": max_problems}
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return ProbeReport(spec.key, protocol, entries, pairs,
                       out or Path("results") / "probe" / f"{spec.name}-predictions-{stamp}")


def probe_items(spec: BenchmarkSpec, data_dir: str | None = None) -> list[Any]:
    """The benchmark's items: a generated suite's from the profile that serves it (found through the registries:
    reporting imports no profile; the items ask in their original wording), a data benchmark's from its local copy
    or the hub."""
    if spec.profile:
        from corl_bench.registries import PROFILES

        return list(PROFILES.get(spec.profile)().benchmark(spec.name))
    from corl_bench.eval.data import load_rows
    from corl_bench.eval.items import build_items

    return build_items(spec, load_rows(spec, data_dir))


def probe_decoding(spec: BenchmarkSpec, *, samples: int = 1, temperature: float = 0.8, greedy: bool = False,
                   max_new_tokens: int | None = None) -> Decoding:
    """The probe's decoding: the spec's (top-p, stops, token cap) with k samples at ``temperature``, or greedy."""
    from corl_bench.eval.evaluator import with_overrides

    if greedy:
        return with_overrides(spec.decoding, greedy=True, samples=0, max_new_tokens=max_new_tokens)
    if samples < 1:
        raise ConfigError(f"--samples must be >= 1 (got {samples})")
    if temperature <= 0:
        raise ConfigError(f"--temperature must be > 0 (got {temperature}); use --greedy for argmax decoding")
    return with_overrides(spec.decoding, greedy=False, samples=samples, temperature=temperature,
                          max_new_tokens=max_new_tokens)


def _check_identity(agent_dir: Path, m: ProbeModel) -> None:
    path = agent_dir / IDENTITY
    mine = {"label": m.label, "ref": m.ref, "seed": m.seed}
    if path.is_file():
        old = json.loads(path.read_text(encoding="utf-8"))
        if {k: old.get(k) for k in mine} != mine:
            raise ConfigError(f"{agent_dir} holds predictions of {old.get('ref')} (seed {old.get('seed')}), not "
                              f"{m.ref} (seed {m.seed}); probe into another --out or delete that folder")
        return
    write_json(path, mine)


def _missing(path: Path, items: Sequence[Any], dec: Decoding) -> int:
    have: set[tuple[str, str, int]] = set()
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                r = json.loads(line)
                have.add((str(r["problem_id"]), r["decoding"], int(r["sample_index"])))
            except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                continue
    plan = ([("greedy", 1)] if dec.greedy else []) + ([("sampled", dec.samples)] if dec.samples else [])
    return sum(1 for it in items for d, n in plan for k in range(n) if (it.id, d, k) not in have)


def probe_generate(args: Sequence[str], benchmark: str, *, samples: int = 1, temperature: float = 0.8,
                   greedy: bool = False, max_new_tokens: int | None = None, max_problems: int | None = None,
                   phase: str = "base", seed: int = 0, out: Path | None = None, data_dir: str | None = None,
                   chunk: int = 32, workers: int = 2, report: Callable[[str], None] = log.info) -> ProbeReport:
    """Generate what is missing for every model (resumable, per model under ``<out>/predictions``), then probe."""
    from corl_bench.eval.targets import check_manifest

    spec = get_spec(benchmark)
    dec = probe_decoding(spec, samples=samples, temperature=temperature, greedy=greedy, max_new_tokens=max_new_tokens)
    if phase not in ("base", "final"):
        raise ConfigError(f"--phase must be base or final (got {phase!r})")
    models = resolve_models(args, phase=phase, seed=seed)
    if len(models) < 2:
        raise ConfigError("the probe needs at least two models (MODEL@SEED adds a seed-only partner)")
    if greedy and len({m.ref for m in models}) < len(models):
        log.warning("greedy decoding: a model and its @SEED twin give identical predictions")
    items = probe_items(spec, data_dir)
    items = items[:max_problems] if max_problems else items
    tag = "greedy" if greedy else f"T{temperature:g}-k{samples}"
    root = out or Path("results") / "probe" / f"{spec.name}-{tag}"
    draws, entries = {}, []
    for m in models:
        agent_dir = root / "predictions" / m.dirname
        path = agent_dir / f"{spec.name}.jsonl"
        _check_identity(agent_dir, m)
        check_manifest(agent_dir, spec, dec, m.ref, "ours", seed=m.seed, chunk=chunk)
        todo = _missing(path, items, dec)
        if todo:
            from corl_bench.eval.evaluator import evaluate_spec
            from corl_bench.models.load import load_model

            report(f"{m.label}: generating {todo} completions ({m.ref}, seed {m.seed})")
            model, tok = load_model(m.ref)
            evaluate_spec(model, tok, spec, items, out_path=path, seed=m.seed, decoding=dec, chunk=chunk,
                          workers=workers, backend="hf" if spec.modality == "image" else "fast")
            del model, tok
        else:
            report(f"{m.label}: all {len(items)} problems already in {path}")
        draws[m.label] = _draws(_rows(path, spec), spec, greedy=greedy, samples=samples, name=str(path),
                                keep={it.id for it in items})
        entries.append(_model_entry(m.label, draws[m.label], ref=m.ref, seed=m.seed, source=str(path)))
    pairs = probe_pairs(draws, equivalent=equivalence_for(spec))
    protocol = {"source": "generated", "phase": phase, "zero_shot": spec.fewshot == 0,
                "decoding": json.loads(json.dumps(asdict(dec))), "draws": 1 if greedy else samples,
                "max_problems": max_problems, "n_problems": len(items), "seed": seed}
    return ProbeReport(spec.key, protocol, entries, pairs, root)


def write_report(rep: ProbeReport) -> tuple[Path, Path]:
    """probe.json and probe.md under ``rep.out`` (each written atomically)."""
    data = {"benchmark": rep.benchmark, "created_at": rep.created_at, "protocol": rep.protocol,
            "units": "shares are fractions in [0, 1]", "definitions": DEFINITIONS, "models": rep.models,
            "pairs": [asdict(p) for p in rep.pairs]}
    write_json(rep.out / "probe.json", data)
    proto = ", ".join(f"{k}={v}" for k, v in rep.protocol.items() if k != "decoding")
    header = f"# Error-overlap probe: {rep.benchmark}\n\n{proto}\n\nShares in percent."
    atomic_write_text(rep.out / "probe.md", markdown(rep.pairs, header))
    return rep.out / "probe.json", rep.out / "probe.md"


def probe_table(rep: ProbeReport) -> Any:
    """A rich table of every pair (percents; kappa with two decimals)."""
    from rich.table import Table

    table = Table(title=f"error overlap on {rep.benchmark}, % of n = {rep.pairs[0].n if rep.pairs else 0} problems, "
                        f"{rep.protocol.get('draws')} draw(s); u = at least one right (our reading)")
    for col in ("A", "B"):
        table.add_column(col, no_wrap=True)
    for col in ("kappa", "c", "w", "u", "both", "acc A", "acc B"):
        table.add_column(col, justify="right", no_wrap=True)
    for p in rep.pairs:
        table.add_row(p.a, p.b, "-" if p.kappa is None else f"{p.kappa:.2f}", pct(p.c), pct(p.w), pct(p.u),
                      pct(p.both_right), pct(p.acc_a), pct(p.acc_b))
    return table


def ensemble_from_runs(args: Sequence[str], benchmark: str, *, phase: str = "final", per_model: int = 4
                       ) -> tuple[Any, list[PredictionSource]]:
    """:func:`corl_bench.report.controls.ensemble_majority` of two stored prediction files (``RUN:agent`` x 2, or one run
    with exactly two agents); returns the scores and the two sources."""
    from corl_bench.report.controls import ensemble_majority
    from corl_bench.eval.evaluator import row_grader

    spec = get_spec(benchmark)
    found = prediction_sources(args, phase=phase, benchmark=spec.name)
    if len(found) != 2:
        raise ConfigError(f"the ensemble needs exactly two models; got {len(found)} from {' '.join(args)} (pass "
                          "RUN_DIR:agent RUN_DIR:agent, or one run with two agents)")
    a, b = found
    scores = ensemble_majority(_rows(a.path, spec), _rows(b.path, spec), per_model, grade_row=row_grader(spec),
                               a=a.label, b=b.label)
    return scores, [a, b]


def ensemble_table(scores: Any, title: str = "") -> Any:
    """A small rich table: each model's own maj@k and avg@k, and the pooled ensemble's maj@k."""
    from rich.table import Table

    k, h = scores.k, scores.per_model
    table = Table(title=title or f"ensemble maj@{k} ({h}+{h} pooled), n={scores.n_problems}")
    for col in ("model", f"maj@{k} %", f"avg@{k} %"):
        table.add_column(col, justify="left" if col == "model" else "right", no_wrap=True)
    table.add_row(f"{scores.a} (own {k})", pct(scores.maj_a), pct(scores.avg_a))
    table.add_row(f"{scores.b} (own {k})", pct(scores.maj_b), pct(scores.avg_b))
    table.add_row(f"ensemble ({h} + {h})", pct(scores.ensemble_maj), "-")
    table.caption = f"{scores.ties} tied pools, won by {scores.a} (pooled first)"
    return table
