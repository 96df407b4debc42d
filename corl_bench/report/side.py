"""The paper's side tables - three-agent ring (``n3``), CoMAS protocol (``comas``), text test-time ensemble control
(``ensLLM``) and pre-RL error-overlap probe (``decPool``) - as :class:`corl_bench.report.reference.PaperBlock` data,
and our rows beside the paper's where backbones match.

Public API (no torch):

* :func:`comas`, :func:`ens_llm`, :func:`dec_pool` ``(path=None) -> tuple[PaperBlock, ...]`` - the tables as printed
  (:func:`corl_bench.report.reference.n3` loads the three-agent ring).
* :func:`side_blocks` ``(backbone=None, path=None)`` - the four tables in the paper's order (with ``backbone``: the
  three-agent ring's block of that backbone only).
* :func:`with_ours` ``(blocks, root, results) -> (blocks, notes, warnings)`` - our rows (label suffix " (ours)",
  :attr:`PaperRow.source` "ours") inserted after the paper's row they stand beside:

  - ``ensLLM``: every untagged two-agent run under ``root`` labelled TTRL or Co-RL (cross-family) whose agents are Qwen2.5-3B and
    Llama-3.2-3B-Instruct (:data:`corl_bench.report.reference.BACKBONES`), on gsm8k / math500 / amc83:
    :func:`corl_bench.report.controls.ensemble_majority` with 4 + 4 samples (maj@8; the Qwen agent's samples first in
    the pool), each model's own maj@8, mean ± sd over seeds. Needs 8 sampled completions per problem.
  - ``decPool``: every ``probe.json`` (``corl-bench probe``) under ``root`` whose two models map to a pair the paper
    probed (a model against itself with another seed is its "× itself" row).

  The three-agent ring's rows beside ours are in the main table (:mod:`corl_bench.report.kinds`); CoMAS does not
  state its backbone pair (corl-paper-and-code.md section 5.5), so no row of ours is ever placed beside it.

The ensemble table's columns are not named in the paper's data; GSM8K, MATH-500, AMC is the order the website's
protocol text gives (unverified), and the fourth column is their mean (checked on every row).
"""

from __future__ import annotations

import json
import logging
import statistics
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional, Sequence

from corl_bench.report import methods as method_views
from corl_bench.report import reference as ref
from corl_bench.report.reference import PaperBlock, PaperRow

logger = logging.getLogger(__name__)

__all__ = ["DEC_NAMES", "ENS_BENCHMARKS", "comas", "dec_pool", "ens_llm", "side_blocks", "with_ours"]

#: Our benchmark -> the ensemble control's column (the order the website's protocol text gives; unverified).
ENS_BENCHMARKS: dict[str, str] = {"gsm8k": "GSM8K", "math500": "MATH500", "amc83": "AMC"}
ENS_COLUMNS: tuple[str, ...] = (*ENS_BENCHMARKS.values(), "Avg")
#: Our row label (as the main table labels the run) -> the ensemble control's row prefix: the paper's Co-RL pair is
#: its different-family one (not same-family, not different-family+).
ENS_LABELS: dict[str, str] = {"TTRL": "TTRL", "Co-RL (cross-family)": "Co-RL"}
#: Paper backbone -> how the ensemble control names it (the pair is Qwen2.5-3B x Llama-3.2-3B-Instruct).
ENS_NAMES: dict[str, str] = {"Qwen2.5-3B": "Qwen2.5-3B", "Llama-3.2-3B-Instruct": "Llama-3.2-3B"}
#: Paper backbone -> how the error-overlap probe names it.
DEC_NAMES: dict[str, str] = {"Qwen2.5-3B": "Qwen2.5-3B", "Llama-3.2-3B-Instruct": "Llama-3.2-3B",
                             "Qwen3-1.7B": "Qwen3-1.7B-Base", "Qwen2.5-7B": "Qwen2.5-7B",
                             "Llama-3.1-8B-Instruct": "Llama-3.1-8B", "Phi-3.5-mini": "Phi-3.5-mini",
                             "MiniCPM3-4B": "MiniCPM3-4B"}
DEC_COLUMNS: tuple[str, ...] = ("level", "kappa", "c", "w", "u")
PER_MODEL = 4  # the paper's ensemble pools 4 rollouts of each model (maj@8)


def _malformed(key: str, exc: Exception) -> ValueError:
    return ValueError(f"paper results: {key} is malformed ({exc}); restore corl_bench/report/paper-results.json "
                      "from git")


def _row(label: str, values: Sequence[Any], marks: Optional[Sequence[Any]], n: int) -> PaperRow:
    row = PaperRow(label, tuple(str(v) for v in values), tuple(str(m or "") for m in (marks or [""] * n)))
    if len(row.printed) != n or len(row.marks) != n:
        raise ValueError(f"row {label!r} has {len(row.printed)} values for {n} columns")
    return row


def comas(path: str | Path | None = None) -> tuple[PaperBlock, ...]:
    """The CoMAS-protocol comparison (``comas``): one block, columns from its own header (GSM8K ... SciBench, Avg)."""
    data = ref.load_paper(path)
    try:
        columns = tuple(str(c) for c in data["comas"]["header"])
        rows = tuple(_row(str(r["method"]), r["vals"], r.get("marks"), len(columns)) for r in data["comas"]["rows"])
    except (KeyError, TypeError, ValueError) as exc:
        raise _malformed("comas", exc) from None
    return (PaperBlock("", "", columns, rows, table="comas",
                       heading="CoMAS protocol (CoMAS's suite, driver and graders; backbone pair not stated)"),)


def ens_llm(path: str | Path | None = None) -> tuple[PaperBlock, ...]:
    """The text test-time ensemble control (``ensLLM``): one block, rows the printed settings."""
    data = ref.load_paper(path)
    try:
        rows = tuple(_row(str(r["setting"]), r["vals"], r.get("marks"), len(ENS_COLUMNS)) for r in data["ensLLM"])
    except (KeyError, TypeError, ValueError) as exc:
        raise _malformed("ensLLM", exc) from None
    return (PaperBlock("", "", ENS_COLUMNS, rows, table="ensLLM",
                       heading="Ensemble control, Qwen2.5-3B × Llama-3.2-3B-Instruct (maj@8, T 0.6)"),)


def dec_pool(path: str | Path | None = None) -> tuple[PaperBlock, ...]:
    """The pre-RL error-overlap probe (``decPool``): one block per tier, rows the pairs, columns level, kappa, c, w,
    u (c, w, u in percent)."""
    data = ref.load_paper(path)
    tiers: dict[str, list[PaperRow]] = {}
    try:
        for r in data["decPool"]:
            values = (r["level"], f"{float(r['kappa']):.2f}", f"{float(r['c']):.1f}", f"{float(r['w']):.1f}",
                      f"{float(r['u']):.1f}")
            tiers.setdefault(str(r["tier"]), []).append(_row(str(r["pair"]), values, None, len(DEC_COLUMNS)))
    except (KeyError, TypeError, ValueError) as exc:
        raise _malformed("decPool", exc) from None
    return tuple(PaperBlock("", tier, DEC_COLUMNS, tuple(rows), table="decPool", heading=tier)
                 for tier, rows in tiers.items())


def side_blocks(backbone: Optional[str] = None, path: str | Path | None = None) -> tuple[PaperBlock, ...]:
    """The paper's side tables in its order: three-agent ring, CoMAS, text ensemble control, error-overlap probe;
    with ``backbone``, only the three-agent ring's block of that backbone (if it has one)."""
    if backbone is not None:
        return tuple(b for b in ref.n3(path) if b.backbone == backbone)
    return ref.n3(path) + comas(path) + ens_llm(path) + dec_pool(path)


# ------------------------------------------------------------------------------------------ ours beside
def _fmt(values: Sequence[float], digits: int = 1, scale: float = 100.0) -> str:
    mean = statistics.fmean(values) * scale
    sd = f" ± {statistics.stdev(values) * scale:.{digits}f}" if len(values) > 1 else ""
    return f"{mean:.{digits}f}{sd}"


def _insert(block: PaperBlock, ours: Mapping[str, list[PaperRow]]) -> PaperBlock:
    rows: list[PaperRow] = []
    for row in block.rows:
        rows.append(row)
        rows += ours.get(row.label, [])
    return replace(block, rows=tuple(rows))


def _ensemble_rows(root: Path, results: Sequence[Any], warnings: list[str]) -> tuple[dict[str, list[PaperRow]],
                                                                                     list[str]]:
    """paper setting -> our rows, and the runs they come from."""
    from corl_bench.config import ConfigError
    from corl_bench.report.collect import row_grader_for
    from corl_bench.report.controls import ensemble_majority
    from corl_bench.results import RunDir, read_jsonl

    runs: dict[str, list[Any]] = {}
    for r in results:
        runs.setdefault(r.rel, []).append(r)
    per_setting: dict[str, list[dict[str, float]]] = {}
    used: list[str] = []
    for rel, agents in runs.items():
        first = agents[0]
        if first.tag or len(agents) != 2:
            continue
        prefix = ENS_LABELS.get(method_views.describe(first.method).row(first.cohort, first.paper_row)[1])
        if prefix is None:
            continue
        names = {ENS_NAMES.get(ref.backbone_for(a.family) or ""): a for a in agents}
        if set(names) != set(ENS_NAMES.values()):
            continue
        qwen, llama = names["Qwen2.5-3B"], names["Llama-3.2-3B"]
        run = RunDir(root / rel)
        seed_values: dict[str, dict[str, float]] = {"Qwen2.5-3B": {}, "Llama-3.2-3B": {}, "ensemble": {}}
        for bench, column in ENS_BENCHMARKS.items():
            if bench not in qwen.final or bench not in llama.final:
                continue
            try:
                rows_q = read_jsonl(run.predictions_path(qwen.phase, qwen.agent, bench), ConfigError)
                rows_l = read_jsonl(run.predictions_path(llama.phase, llama.agent, bench), ConfigError)
                s = ensemble_majority(rows_q, rows_l, PER_MODEL, grade_row=row_grader_for(bench),
                                      a=qwen.agent, b=llama.agent)
            except (ConfigError, OSError, ValueError) as exc:
                warnings.append(f"{rel}: no ensemble control on {bench} ({exc})")
                continue
            seed_values["Qwen2.5-3B"][column] = s.maj_a
            seed_values["Llama-3.2-3B"][column] = s.maj_b
            seed_values["ensemble"][column] = s.ensemble_maj
        if not seed_values["ensemble"]:
            continue
        used.append(rel)
        for who, values in seed_values.items():
            per_setting.setdefault(f"{prefix} ({who})", []).append(values)
    out: dict[str, list[PaperRow]] = {}
    for setting, seeds in per_setting.items():
        cells = []
        for column in ENS_BENCHMARKS.values():
            vals = [s[column] for s in seeds if column in s]
            cells.append(_fmt(vals) if vals else "–")
        avgs = [statistics.fmean(s[c] for c in ENS_BENCHMARKS.values()) for s in seeds
                if all(c in s for c in ENS_BENCHMARKS.values())]
        cells.append(_fmt(avgs) if avgs else "–")
        out[setting] = [PaperRow(f"{setting} (ours, n={len(seeds)})", tuple(cells), ("",) * len(cells), "ours")]
    return out, used


def _probe_name(model: Mapping[str, Any]) -> Optional[str]:
    """The decPool name of a probe.json model (its ``ref``, or label; for stored predictions of a run, the agent's
    family from run.json); None when it is not a model the paper probed."""
    for key in ("ref", "label"):
        value = model.get(key)
        if isinstance(value, str):
            name = DEC_NAMES.get(ref.backbone_for(value.split("@")[0]) or "")
            if name:
                return name
    source = model.get("source")
    if isinstance(source, str) and len(Path(source).parents) > 3:  # <run>/eval/<phase>/<agent>/<bench>.jsonl
        from corl_bench.results import RunDir

        try:
            run = RunDir(Path(source).parents[3])
            families = {a.name: a.family for a in (run.record().agents or ())} if run.is_run() else {}
        except (OSError, ValueError):
            return None
        return DEC_NAMES.get(ref.backbone_for(families.get(Path(source).parent.name) or "") or "")
    return None


def _pair_key(text: str) -> tuple[str, str]:
    a, _, b = text.partition(" × ")
    return tuple(sorted((a, a if b == "itself" else b)))  # type: ignore[return-value]


def _probe_rows(root: Path, warnings: list[str]) -> tuple[dict[tuple[str, str], list[tuple[str, Mapping]]],
                                                         list[str]]:
    """pair key -> [(probe.json relative path, pair)] of every probe.json under ``root`` whose models the paper
    probed, and the probe.json files read."""
    found: dict[tuple[str, str], list[tuple[str, Mapping]]] = {}
    files = []
    for path in sorted(root.rglob("probe.json")):
        rel = path.relative_to(root).as_posix()
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            models = {m["label"]: m for m in data["models"]}
            pairs = list(data["pairs"])
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as exc:
            warnings.append(f"{rel}: not a probe report ({type(exc).__name__}); ignored")
            continue
        files.append(rel)
        for p in pairs:
            ma, mb = models.get(p.get("a"), {}), models.get(p.get("b"), {})
            na, nb = _probe_name(ma), _probe_name(mb)
            if not na or not nb:
                continue
            same = ma.get("ref") is not None and ma.get("ref") == mb.get("ref")
            key = tuple(sorted((na, na if same else nb)))
            found.setdefault(key, []).append((f"{rel} ({data.get('benchmark')}, n={p.get('n')}, "  # type: ignore
                                              f"{p.get('draws', 1)} draw(s))", p))
    return found, files


def _dec_row(label: str, level: str, pair: Mapping[str, Any]) -> PaperRow:
    def pct(x: Any) -> str:
        return "–" if x is None else f"{100.0 * float(x):.1f}"

    kappa = pair.get("kappa")
    return PaperRow(label, (level, "–" if kappa is None else f"{float(kappa):.2f}", pct(pair.get("c")),
                            pct(pair.get("w")), pct(pair.get("u"))), ("",) * 5, "ours")


def with_ours(blocks: Sequence[PaperBlock], root: Optional[Path], results: Sequence[Any]
              ) -> tuple[tuple[PaperBlock, ...], list[tuple[str, str]], list[str]]:
    """``blocks`` with our ensemble-control and probe rows beside the paper's (see the module docstring), the notes
    that say where they come from as (paper table key, line), and warnings."""
    notes: list[tuple[str, str]] = []
    warnings: list[str] = []
    if root is None or not root.is_dir():
        return tuple(blocks), notes, warnings
    out = list(blocks)
    if any(b.table == "ensLLM" for b in out):
        ours, used = _ensemble_rows(root, results, warnings)
        if ours:
            out = [_insert(b, ours) if b.table == "ensLLM" else b for b in out]
            notes.append(("ensLLM", f"Rows marked (ours) are {len(used)} run(s) under {root} "
                         f"({', '.join(used[:3])}{' ...' if len(used) > 3 else ''}): maj@8 of each model's own first "
                         "8 samples, and of 4 + 4 pooled (the Qwen agent's first), mean ± sd over seeds, percent."))
    if any(b.table == "decPool" for b in out):
        found, files = _probe_rows(root, warnings)
        matched = 0
        new = []
        for b in out:
            if b.table != "decPool":
                new.append(b)
                continue
            ours: dict[str, list[PaperRow]] = {}
            for row in b.rows:
                for where, pair in found.get(_pair_key(row.label), []):
                    ours.setdefault(row.label, []).append(_dec_row(f"{row.label} (ours: {where})", row.printed[0],
                                                                   pair))
                    matched += 1
            new.append(_insert(b, ours))
        out = new
        if files:
            notes.append(("decPool", f"{len(files)} probe.json file(s) under {root}; {matched} pair(s) "
                         "match a pair the paper probed and are shown beside it (ours), the rest have no paper "
                         "backbone (see their probe.md)."))
    return tuple(out), notes, warnings
