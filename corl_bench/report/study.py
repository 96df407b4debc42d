"""The micro study's verdicts: each of the paper's claims as paired, per-seed comparisons of stored predictions.

    from corl_bench.report.study import load_agent_scores, claim_comparisons, collapse_report, to_markdown
    scores, warnings = load_agent_scores(Path("results/sweeps/micro-study-quick"))
    print(to_markdown(claim_comparisons(scores)))

Every number is recomputed from the prediction files (``eval/<phase>/<agent>/<benchmark>.jsonl``) with the
benchmark's grader, as ``corl-bench table`` does. A comparison pairs two cells of the grid **seed by seed** (the same
seed gives both cells the same base weights, training stream and evaluation sampling seed), so the per-seed
difference removes the variation the two share. A cell's value for a backbone is the mean over its agents of that
family (two for Co-RL same-family). Metrics are fractions; the markdown shows percentage points.

Verdict rule (a heuristic for 3–5 seeds, not a significance test; it is printed with every table):
``holds`` when the mean difference is positive, every seed agrees in sign and the mean exceeds twice its standard
error; ``reversed`` for the mirror image; ``inconclusive`` otherwise (including fewer than two paired seeds).

The claims themselves are data: ``corl_bench/report/claims.yaml`` (shipped with the package; :func:`load_claims`
reads it, or another file of the same layout), each a :class:`Claim` — two :class:`Cell` objects, the backbones and
a margin. This module never imports torch.
"""

from __future__ import annotations

import logging
import math
import statistics
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

import yaml

from corl_bench.config import ConfigError
from corl_bench.eval.metrics import score_predictions
from corl_bench.report.collect import row_grader_for
from corl_bench.results import RunDir, find_runs

log = logging.getLogger(__name__)

__all__ = ["AgentScores", "Cell", "Claim", "Comparison", "claim_comparisons", "collapse_report", "compare",
           "load_agent_scores", "load_claims", "to_markdown", "verdict"]

METRIC_NAMES = {"avg_k": "pass@1", "greedy": "greedy", "maj_k": "maj@k"}


@dataclass(frozen=True)
class AgentScores:
    """One agent of one finished run: its benchmark-averaged metrics before and after training."""

    method: str
    cohort: str
    tag: str
    agent: str
    family: str
    seed: int
    final: dict[str, float]
    """metric -> mean over the run's benchmarks (final phase)"""
    base: dict[str, float]
    """the same for the base phase ({} if the run has no base evaluation)"""


@dataclass(frozen=True)
class Cell:
    """Selects agents: a method, optionally a cohort (None = any cohort; for single-agent methods, which train every
    agent independently) and a tag ("" = untagged runs only). ``phase="base"`` selects their base scores; ``agent``
    (a cohort agent's name, e.g. a0-smol) one agent of a cohort with several of the same family (None = their mean)."""

    method: str
    cohort: Optional[str] = None
    tag: str = ""
    phase: str = "final"
    agent: Optional[str] = None

    @property
    def label(self) -> str:
        name = self.method + (f" × {self.cohort}" if self.cohort else "") + (f" [{self.tag}]" if self.tag else "")
        name += f" ({self.agent})" if self.agent else ""
        return f"{name} (base)" if self.phase == "base" else name


def _mean_of(per_bench: Iterable[dict[str, Optional[float]]]) -> dict[str, float]:
    per_bench = list(per_bench)
    out = {}
    for metric in METRIC_NAMES:
        values = [m[metric] for m in per_bench if m.get(metric) is not None]
        if values and len(values) == len(per_bench):
            out[metric] = sum(values) / len(values)
    return out


def _phase(run: RunDir, phase: str, agent: str, only: Optional[Sequence[str]] = None) -> dict[str, float]:
    per_bench = []
    for bench in run.benchmarks(phase, agent):
        if only is not None and bench not in only:
            continue
        rows = run.predictions(phase, agent, bench)
        if rows:
            per_bench.append(score_predictions(rows, row_grader_for(bench)).metrics())
    return _mean_of(per_bench) if per_bench else {}


def load_agent_scores(results_dir: Path, benchmarks: Optional[Sequence[str]] = None
                      ) -> tuple[list[AgentScores], list[str]]:
    """Every agent of every finished run under ``results_dir``, and one-line warnings for runs skipped; ``benchmarks``
    limits the mean to those benchmarks (default: every benchmark the run evaluated)."""
    out, warnings = [], []
    for run in find_runs(Path(results_dir)):
        try:
            record = run.record()
            if not record.finished:
                warnings.append(f"{run.name}: status {record.status!r}; not used")
                continue
            for key in ("method", "cohort", "seed", "agents"):
                if record.problem(key):
                    raise ValueError(f"run.json {record.problem(key)}")
            for agent in record.agents or ():
                final = _phase(run, "final", agent.name, benchmarks)
                if final:
                    out.append(AgentScores(record.method, record.cohort, record.tag or "", agent.name,
                                           agent.family or "", record.seed, final,
                                           _phase(run, "base", agent.name, benchmarks)))
        except (OSError, ValueError, KeyError, TypeError) as e:
            warnings.append(f"{run.name}: unreadable ({type(e).__name__}: {e}); skipped")
    return out, warnings


def _per_seed(scores: Sequence[AgentScores], cell: Cell, family: str, metric: str) -> dict[int, float]:
    """seed -> the cell's value for one backbone (mean over its agents of that family, first cohort by name if a
    single-agent method ran in several)."""
    chosen = [s for s in scores if s.method == cell.method and s.tag == cell.tag and s.family == family
              and (cell.cohort is None or s.cohort == cell.cohort) and (cell.agent is None or s.agent == cell.agent)]
    if cell.cohort is None and chosen:
        cohorts = sorted({s.cohort for s in chosen}, key=lambda c: (c != "single", c))
        chosen = [s for s in chosen if s.cohort == cohorts[0]]
    by_seed: dict[int, list[float]] = {}
    for s in chosen:
        value = (s.base if cell.phase == "base" else s.final).get(metric)
        if value is not None:
            by_seed.setdefault(s.seed, []).append(value)
    return {seed: sum(v) / len(v) for seed, v in by_seed.items()}


def verdict(diffs: Sequence[float], margin: float = 0.0) -> str:
    """``holds`` / ``reversed`` / ``inconclusive`` for paired per-seed differences (see the module docstring);
    ``margin`` is added to every difference first (``a`` at most ``margin`` below ``b`` counts as holding)."""
    if len(diffs) < 2:
        return "inconclusive"
    diffs = [d + margin for d in diffs]
    mean = statistics.fmean(diffs)
    se = statistics.stdev(diffs) / math.sqrt(len(diffs))
    if all(d > 0 for d in diffs) and mean > 2 * se:
        return "holds"
    if all(d < 0 for d in diffs) and -mean > 2 * se:
        return "reversed"
    return "inconclusive"


@dataclass(frozen=True)
class Comparison:
    """``a`` minus ``b`` on one backbone and metric, paired by seed."""

    claim: str
    family: str
    metric: str
    a: str
    b: str
    seeds: tuple[int, ...]
    a_values: tuple[float, ...]
    b_values: tuple[float, ...]
    margin: float = 0.0

    @property
    def diffs(self) -> tuple[float, ...]:
        return tuple(x - y for x, y in zip(self.a_values, self.b_values))

    @property
    def mean(self) -> Optional[float]:
        return statistics.fmean(self.diffs) if self.diffs else None

    @property
    def sd(self) -> Optional[float]:
        return statistics.stdev(self.diffs) if len(self.diffs) >= 2 else None

    @property
    def verdict(self) -> str:
        return verdict(self.diffs, self.margin)


def compare(scores: Sequence[AgentScores], claim: str, a: Cell, b: Cell, family: str, metric: str,
            margin: float = 0.0) -> Comparison:
    """``a`` vs ``b`` for one backbone and metric over the seeds both have."""
    va, vb = _per_seed(scores, a, family, metric), _per_seed(scores, b, family, metric)
    seeds = tuple(sorted(set(va) & set(vb)))
    return Comparison(claim, family, metric, a.label, b.label, seeds, tuple(va[s] for s in seeds),
                      tuple(vb[s] for s in seeds), margin)


@dataclass(frozen=True)
class Claim:
    """One of the paper's claims: ``a`` above ``b`` minus ``margin`` on each of ``backbones``."""

    name: str
    a: Cell
    b: Cell
    backbones: tuple[str, ...]
    margin: float = 0.0


CLAIMS_FILE = "claims.yaml"
"""the shipped claims, package data of :mod:`corl_bench.report`"""
_CELL_FIELDS = ("method", "cohort", "tag", "phase", "agent")
_CLAIM_FIELDS = ("claim", "a", "b", "backbones", "margin")


def _cell(raw: Any, where: str) -> Cell:
    if not isinstance(raw, Mapping) or not isinstance(raw.get("method"), str) or not raw["method"]:
        raise ConfigError(f"{where} must be a mapping with a method (e.g. {{method: corl, cohort: cross-family}})")
    unknown = sorted(set(raw) - set(_CELL_FIELDS))
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]} is not a cell field; valid: {', '.join(_CELL_FIELDS)}")
    phase = raw.get("phase", "final")
    if phase not in ("final", "base"):
        raise ConfigError(f"{where}.phase must be final or base (got {phase!r})")
    cohort, agent = raw.get("cohort"), raw.get("agent")
    return Cell(str(raw["method"]), None if cohort is None else str(cohort), str(raw.get("tag") or ""), phase,
                None if agent is None else str(agent))


def _claim(raw: Any, where: str) -> Claim:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where} must be a mapping with claim, a, b, backbones (and margin)")
    unknown = sorted(set(raw) - set(_CLAIM_FIELDS))
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]} is not a claim field; valid: {', '.join(_CLAIM_FIELDS)}")
    if not isinstance(raw.get("claim"), str) or not raw["claim"].strip():
        raise ConfigError(f"{where}.claim is required: the row label, e.g. claim: Co-RL above TTRL")
    backbones = raw.get("backbones")
    if isinstance(backbones, str) or not isinstance(backbones, list) or not backbones \
            or not all(isinstance(b, str) and b for b in backbones):
        raise ConfigError(f"{where}.backbones must be a non-empty list of model families (e.g. [qwen2-bpe])")
    margin = raw.get("margin", 0.0)
    if isinstance(margin, bool) or not isinstance(margin, (int, float)):
        raise ConfigError(f"{where}.margin must be a number (a fraction: 0.02 = 2 points; got {margin!r})")
    return Claim(raw["claim"].strip(), _cell(raw.get("a"), f"{where}.a"), _cell(raw.get("b"), f"{where}.b"),
                 tuple(backbones), float(margin))


def parse_claims(text: str, origin: str = CLAIMS_FILE) -> tuple[Claim, ...]:
    """Claims from a claims file's text; one-line ConfigError naming ``origin``, the field and the fix."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        raise ConfigError(f"{origin} is not valid YAML; fix its syntax") from None
    if not isinstance(data, Mapping) or not isinstance(data.get("claims"), list) or not data["claims"]:
        raise ConfigError(f"{origin}: needs a non-empty list under claims: (each with claim, a, b, backbones)")
    return tuple(_claim(raw, f"{origin}: claims[{i}]") for i, raw in enumerate(data["claims"]))


@lru_cache(maxsize=None)
def _shipped_claims() -> tuple[Claim, ...]:
    text = resources.files("corl_bench.report").joinpath(CLAIMS_FILE).read_text(encoding="utf-8")
    return parse_claims(text, f"corl_bench/report/{CLAIMS_FILE}")


def load_claims(path: Path | str | None = None) -> tuple[Claim, ...]:
    """The claims of ``path`` (a YAML file laid out as ``corl_bench/report/claims.yaml``), the shipped ones without."""
    if path is None:
        return _shipped_claims()
    return parse_claims(Path(path).read_text(encoding="utf-8"), str(path))


def claim_comparisons(scores: Sequence[AgentScores], metrics: Sequence[str] = ("avg_k", "greedy", "maj_k"),
                      claims: Optional[Sequence[Claim]] = None) -> list[Comparison]:
    """Every claim × backbone × metric that has at least one paired seed; ``claims`` default to the shipped
    ``claims.yaml`` (:func:`load_claims`)."""
    out = []
    for claim in load_claims() if claims is None else claims:
        for family in claim.backbones:
            for metric in metrics:
                c = compare(scores, claim.name, claim.a, claim.b, family, metric, claim.margin)
                if c.seeds:
                    out.append(c)
    return out


def collapse_report(scores: Sequence[AgentScores], *, metric: str = "avg_k", ratio: float = 0.5) -> list[dict[str, Any]]:
    """Every (method, cohort, tag, agent, seed) whose final ``metric`` fell below ``ratio`` × its base value."""
    out = []
    for s in scores:
        base, final = s.base.get(metric), s.final.get(metric)
        if base and final is not None and final < ratio * base:
            out.append({"method": s.method, "cohort": s.cohort, "tag": s.tag, "agent": s.agent, "seed": s.seed,
                        "base": base, "final": final})
    return out


def _pp(x: Optional[float], signed: bool = False) -> str:
    if x is None:
        return "–"
    return f"{100 * x:+.1f}" if signed else f"{100 * x:.1f}"


def to_markdown(comparisons: Sequence[Comparison]) -> str:
    """One markdown table: claim, backbone, metric, a and b (mean over seeds), Δ mean ± sd, per-seed Δ, verdict."""
    lines = ["| claim | backbone | metric | a | b | Δ (pp) | per seed | verdict |",
             "|---|---|---|---:|---:|---:|---|---|"]
    for c in comparisons:
        per_seed = ", ".join(f"s{s}: {_pp(d, True)}" for s, d in zip(c.seeds, c.diffs))
        sd = f" ± {_pp(c.sd)}" if c.sd is not None else ""
        lines.append(f"| {c.claim} | {c.family} | {METRIC_NAMES.get(c.metric, c.metric)} | "
                     f"{_pp(statistics.fmean(c.a_values))} | {_pp(statistics.fmean(c.b_values))} | "
                     f"{_pp(c.mean, True)}{sd} | {per_seed} | {c.verdict} |")
    return "\n".join(lines) + ("\n\n_a and b: mean over seeds; Δ = a − b paired by seed, mean ± sd; verdict: holds if "
                               "every seed agrees in sign and the mean exceeds twice its standard error (after adding the claim's "
                               "margin: 2 points for \"within 2 points\")._\n")
