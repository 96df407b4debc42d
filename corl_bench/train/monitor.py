"""A live collapse alarm from label-free signals only.

Label-free RL can "rise then fall": the method's own reward keeps climbing while accuracy, which only the hidden
truth shows, falls. A run without labels must see it from what it can measure, so the alarm reads, per agent, only
diagnostics that never touch a label:

    vote/majority_ratio     own plurality count / samples; answer diversity = 1 - majority ratio
    policy/entropy          mean token entropy of the trained samples
    len/mean                completion length in tokens
    peer/agreement          share of prompts where the agent's vote equals a peer's (runs with 2+ agents)

and never ``label/accuracy``, ``reward/true_mean`` or ``reward/accuracy`` (hidden truth, diagnostics only).

**Baseline and window.** Every threshold is a share (or multiple) of the agent's *own* baseline, the mean of a
signal over its first ``baseline_steps`` steps (default 5), so no scale is tied to a model, vocabulary or method.
The current value is the mean over the last ``window`` steps (default 5), checked from the first step whose window
no longer overlaps the baseline (step ``baseline_steps + window - 1``, 0-based).

**Two failure shapes** (defaults of :class:`corl_bench.config.MonitorConfig`):

* *collapse* onto its own answers (TTRL locking onto its mistakes, entropy minimisation): answer diversity fell to
  at most ``diversity_drop`` (0.67) of its baseline — a third of the disagreement among the agent's own samples is
  gone — **and** one corroborating symptom: entropy fell to ``entropy_drop`` (0.67) x, length to ``length_drop``
  (0.67) x, or agreement with the peers to ``agreement_drop`` (0.5) x (growing surer while independent models
  agree less). Learning sharpens too: Co-RL's agents lost 25-30 % of both diversity and entropy over 50 micro
  steps while gaining 15-19 points, so neither symptom alone fires;
* *dissolution* (a certainty reward that no longer tracks the answers, updates that act as noise): token entropy
  rose to ``entropy_rise`` (1.2) x its baseline **while** answer diversity has not fallen at all. Policy-gradient
  training sharpens a policy under any reward that carries signal; a trained policy that grows less certain and
  no more consistent is being taken apart.

It fires at most once per agent (the first step a shape holds) and is recorded as an event row of
``metrics.jsonl``: ``{"step": s, "agent": a, "event": "collapse-alarm", "symptoms": [...], "signals": {name:
{"baseline": b, "now": x, "ratio": x / b}}}``; the per-step rows are never changed. Everything here is a pure
function of the logged diagnostics, so a resumed run replays its history and reaches the same state
(:meth:`CollapseMonitor.replay`), and ``scripts/collapse_check.py`` replays finished runs with other thresholds.
The thresholds were set after looking at micro runs (docs/explanation/findings.md, "The collapse alarm against the
truth"): they are calibrated, not derived.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional, Sequence

log = logging.getLogger(__name__)

__all__ = ["EVENT_NAME", "Alarm", "CollapseMonitor", "CollapseWatch", "LABEL_FREE_SIGNALS", "check_collapse",
           "check_monitor", "describe_rule", "SHAPES", "shape_of", "symptoms"]

EVENT_NAME = "collapse-alarm"

#: The diagnostics the alarm reads (none of them sees a label), and how a signal is derived from them.
LABEL_FREE_SIGNALS: dict[str, str] = {
    "diversity": "1 - vote/majority_ratio",
    "entropy": "policy/entropy",
    "length": "len/mean",
    "agreement": "peer/agreement",
}

_SOURCES = {"diversity": "vote/majority_ratio", "entropy": "policy/entropy", "length": "len/mean",
            "agreement": "peer/agreement"}


@dataclass(frozen=True)
class Alarm:
    """One fired alarm: the step (0-based, as in metrics.jsonl) and agent, the symptoms that held, and every
    signal's baseline, current value and their ratio."""

    step: int
    agent: str
    symptoms: tuple[str, ...]
    signals: dict[str, dict[str, Optional[float]]] = field(default_factory=dict)

    @property
    def shape(self) -> str:
        """``collapse`` or ``dissolution`` (:data:`SHAPES`), from the symptoms."""
        return shape_of(self.symptoms) or "collapse"

    def row(self) -> dict[str, Any]:
        """The event row written to metrics.jsonl."""
        return {"step": self.step, "agent": self.agent, "event": EVENT_NAME, "shape": self.shape,
                "symptoms": list(self.symptoms), "signals": self.signals}

    def text(self) -> str:
        """``a0 at step 23: consensus + entropy (diversity 0.45 -> 0.04, entropy 0.10 -> 0.03, length 21 -> 20)``"""
        parts = []
        for name, s in self.signals.items():
            b, n = s.get("baseline"), s.get("now")
            if b is not None and n is not None:
                parts.append(f"{name} {b:.3g} -> {n:.3g}")
        return (f"{self.agent} at step {self.step}: {self.shape}, {' + '.join(self.symptoms)}"
                + (f" ({', '.join(parts)})" if parts else ""))

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> "Alarm":
        return cls(int(row["step"]), str(row["agent"]), tuple(row.get("symptoms") or ()),
                   dict(row.get("signals") or {}))


def _signal(row: Mapping[str, Any], name: str) -> Optional[float]:
    v = row.get(_SOURCES[name])
    if v is None or isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:  # None, NaN
        return None
    return 1.0 - float(v) if name == "diversity" else float(v)


def _mean(values: Iterable[Optional[float]]) -> Optional[float]:
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def symptoms(series: Sequence[Mapping[str, Any]], *, baseline_steps: int = 5, window: int = 5,
             diversity_drop: float = 0.67, entropy_drop: float = 0.67, length_drop: float = 0.67,
             agreement_drop: float = 0.5,
             entropy_rise: float = 1.2) -> tuple[list[str], dict[str, dict[str, Optional[float]]]]:
    """(symptoms that hold, per signal baseline / now / ratio) for one agent's metric rows of steps 0..t in order.

    Symptoms: ``consensus`` (diversity ratio <= diversity_drop), ``entropy`` (entropy ratio <= entropy_drop),
    ``length`` (length ratio <= length_drop), ``divergence`` (peer-agreement ratio <= agreement_drop),
    ``entropy-rise`` (entropy ratio >= entropy_rise) and ``no-consensus`` (diversity ratio >= 1: the agent's own
    answers agree no more than at the start). Nothing before the window has cleared the baseline
    (``len(series) < baseline_steps + window``). A signal without values, or with a baseline of 0, gives no symptom;
    a signal the run does not log at all (peer agreement of a single agent) is left out of ``signals``."""
    signals: dict[str, dict[str, Optional[float]]] = {}
    if len(series) < baseline_steps + window:
        return [], signals
    base_rows, now_rows = series[:baseline_steps], series[-window:]
    for name in _SOURCES:
        b = _mean(_signal(r, name) for r in base_rows)
        n = _mean(_signal(r, name) for r in now_rows)
        if b is None and n is None:
            continue
        signals[name] = {"baseline": b, "now": n,
                         "ratio": n / b if b is not None and n is not None and b > 0 else None}
    ratio = {name: sig["ratio"] for name, sig in signals.items()}
    checks = [("consensus", "diversity", lambda r: r <= diversity_drop),
              ("entropy", "entropy", lambda r: r <= entropy_drop),
              ("length", "length", lambda r: r <= length_drop),
              ("divergence", "agreement", lambda r: r <= agreement_drop),
              ("entropy-rise", "entropy", lambda r: r >= entropy_rise),
              ("no-consensus", "diversity", lambda r: r >= 1.0)]
    found = [symptom for symptom, name, holds in checks if ratio.get(name) is not None and holds(ratio[name])]
    return found, signals


#: The two failure shapes the alarm knows: (name, the symptom that is required, symptoms of which one must join it).
SHAPES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("collapse", "consensus", ("entropy", "length", "divergence")),
    ("dissolution", "entropy-rise", ("no-consensus",)),
)


def shape_of(found: Sequence[str]) -> Optional[str]:
    """The first failure shape of :data:`SHAPES` that ``found`` symptoms make up, or None."""
    for name, required, joined in SHAPES:
        if required in found and any(j in found for j in joined):
            return name
    return None


def check_collapse(series: Sequence[Mapping[str, Any]], **thresholds: Any) -> Optional[tuple[tuple[str, ...],
                                                                                          dict[str, Any]]]:
    """The rule on one agent's rows of steps 0..t: (symptoms, signals) when it fires at step t, else None.

    Fires on either failure shape of :data:`SHAPES` (see the module docstring): *collapse* = consensus with
    entropy, length or divergence; *dissolution* = entropy rising with no gain in consensus."""
    found, signals = symptoms(series, **thresholds)
    return (tuple(found), signals) if shape_of(found) else None


def describe_rule(cfg: Any) -> str:
    """One line stating the rule with ``cfg``'s thresholds (a :class:`corl_bench.config.MonitorConfig`)."""
    return (f"collapse: answer diversity (1 - majority ratio) <= {cfg.diversity_drop:.2g} x baseline with entropy <= "
            f"{cfg.entropy_drop:.2g} x, length <= {cfg.length_drop:.2g} x or peer agreement <= "
            f"{cfg.agreement_drop:.2g} x; dissolution: entropy >= {cfg.entropy_rise:.2g} x with answer diversity "
            f">= 1 x; baseline = mean of the first {cfg.baseline_steps} steps, now = mean of the last {cfg.window}")


def check_monitor(cfg: Any) -> None:
    """One-line ConfigError when the run's monitor settings cannot work together (validate = run)."""
    from corl_bench.config import ConfigError

    if cfg.run.stop_on_collapse and not cfg.monitor.collapse_alarm:
        raise ConfigError("run.stop_on_collapse=true needs the collapse alarm; set monitor.collapse_alarm=true (or "
                          "run.stop_on_collapse=false)")
    if cfg.monitor.collapse_alarm and cfg.run.steps and \
            cfg.monitor.baseline_steps + cfg.monitor.window > cfg.run.steps and cfg.run.stop_on_collapse:
        raise ConfigError(f"run.stop_on_collapse=true but the alarm cannot fire within run.steps={cfg.run.steps} "
                          f"(monitor.baseline_steps + monitor.window = "
                          f"{cfg.monitor.baseline_steps + cfg.monitor.window}); lower them or run more steps")


class CollapseMonitor:
    """Keeps each agent's metric series and fires :class:`Alarm` once per agent (``cfg``: a MonitorConfig)."""

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg
        self.series: dict[str, list[Mapping[str, Any]]] = {}
        self.fired: dict[str, Alarm] = {}

    def _thresholds(self) -> dict[str, Any]:
        c = self.cfg
        return {"baseline_steps": c.baseline_steps, "window": c.window, "diversity_drop": c.diversity_drop,
                "entropy_drop": c.entropy_drop, "length_drop": c.length_drop, "agreement_drop": c.agreement_drop,
                "entropy_rise": c.entropy_rise}

    def update(self, step: int, metrics: Mapping[str, Mapping[str, Any]]) -> list[Alarm]:
        """Add one step's rows (agent -> diagnostics); the alarms that fire at this step (each agent once)."""
        out = []
        for agent, row in metrics.items():
            self.series.setdefault(agent, []).append(row)
            if agent in self.fired:
                continue
            hit = check_collapse(self.series[agent], **self._thresholds())
            if hit is not None:
                alarm = Alarm(step, agent, hit[0], _rounded(hit[1]))
                self.fired[agent] = alarm
                out.append(alarm)
        return out

    def replay(self, history: Sequence[Mapping[str, Mapping[str, Any]]]) -> list[Alarm]:
        """Feed the per-step history of a resumed run (step 0 first); the alarms it had fired, in order."""
        out = []
        for step, metrics in enumerate(history):
            out += self.update(step, metrics)
        return out


def _rounded(signals: Mapping[str, Mapping[str, Optional[float]]]) -> dict[str, dict[str, Optional[float]]]:
    return {k: {kk: (None if vv is None else round(vv, 6)) for kk, vv in v.items()} for k, v in signals.items()}


class CollapseWatch:
    """The runner's side of the alarm for one run: replays a resumed run's history, turns each step's alarms into
    event rows of metrics.jsonl, a line beside the progress bars and run record entries, and says when
    ``run.stop_on_collapse`` ends the run.

    The run record gets (:meth:`changes`) ``collapse_alarms`` (one entry per fired alarm: step, agent, symptoms,
    signals) and, when the run stops on one, ``stopped: "collapse"`` and ``stopped_after_step`` (the number of steps
    trained)."""

    def __init__(self, cfg: Any, metrics_path: Any) -> None:
        """``cfg``: the run's Config; ``metrics_path``: its metrics.jsonl."""
        self.enabled = bool(cfg.monitor.collapse_alarm)
        self.stop_on_collapse = bool(cfg.run.stop_on_collapse)
        self.monitor = CollapseMonitor(cfg.monitor)
        self.metrics_path = metrics_path
        self.alarms: list[dict[str, Any]] = []  # the rows of the alarms fired so far
        self.stopped = False
        self.stopped_after_step: Optional[int] = None

    def changes(self) -> dict[str, Any]:
        """The run record fields the watch owns (none when the alarm is off: the record then has no
        ``collapse_alarms``; ``[]`` = watched and silent)."""
        if not self.enabled:
            return {}
        out: dict[str, Any] = {"collapse_alarms": tuple(self.alarms)}
        if self.stopped:
            out.update(stopped="collapse", stopped_after_step=self.stopped_after_step)
        return out

    def replay(self, history: Sequence[Mapping[str, Mapping[str, Any]]]) -> None:
        """Rebuild the state of a resumed run from its kept history (its event rows are already in the file)."""
        if not self.enabled:
            return
        alarms = self.monitor.replay(history)
        self.alarms = [a.row() for a in alarms]
        if alarms and self.stop_on_collapse:
            self._stop(alarms[0].step)

    def observe(self, step: int, metrics: Mapping[str, Mapping[str, Any]], say: Any = None) -> bool:
        """One finished step: log and record the alarms that fire now; True when the run must stop after it."""
        if not self.enabled:
            return False
        alarms = self.monitor.update(step, metrics)
        if not alarms:
            return False
        from corl_bench.results import append_jsonl

        append_jsonl(self.metrics_path, [a.row() for a in alarms])
        self.alarms.extend(a.row() for a in alarms)
        for a in alarms:
            text = f"collapse alarm: {a.text()}" + ("; stopping the run (run.stop_on_collapse)"
                                                     if self.stop_on_collapse else "")
            if say is None:
                log.warning("%s", text)
            else:
                say(text)
        if self.stop_on_collapse:
            self._stop(step)
            return True
        return False

    def _stop(self, step: int) -> None:
        self.stopped = True
        self.stopped_after_step = step + 1

    def status(self) -> str:
        """A suffix for the training bar's status: ``  ALARM a0`` once an agent's alarm has fired."""
        if not self.monitor.fired:
            return ""
        return "  ALARM " + ",".join(name.split("-")[0] for name in self.monitor.fired)

    def alarm_steps(self) -> dict[str, int]:
        """agent -> the step at which its alarm fired."""
        return {name: a.step for name, a in self.monitor.fired.items()}
