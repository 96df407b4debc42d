"""The live collapse alarm (issue 14, item 7): the rule on synthetic metric series, its event rows and every reader
skipping them, config validation, the progress display and end-of-run summary, and a clean stop.

No model is trained here except in the one ``slow`` test at the bottom (tiny families, a forced alarm)."""

from __future__ import annotations

import io
import json
import random
import re

import pytest
from rich.console import Console

from corl_bench.config import ConfigError, MonitorConfig, load_config
from corl_bench.record import RunRecord
from corl_bench.results import RunDir, append_jsonl, is_event
from corl_bench.train.monitor import (EVENT_NAME, Alarm, CollapseMonitor, CollapseWatch, check_collapse,
                                      describe_rule, symptoms)

HIDDEN = ("label/accuracy", "reward/true_mean", "reward/accuracy")


def row(ratio: float, entropy: float, length: float, **extra: float) -> dict:
    return {"vote/majority_ratio": ratio, "policy/entropy": entropy, "len/mean": length, "reward/mean": ratio,
            "label/accuracy": 0.5, "reward/true_mean": 0.5, "reward/accuracy": 0.5, **extra}


def ramp(n: int, start: float, end: float) -> list[float]:
    return [start + (end - start) * i / (n - 1) for i in range(n)]


def series(ratios, entropies, lengths) -> list[dict]:
    return [row(r, e, n) for r, e, n in zip(ratios, entropies, lengths)]


def first_alarm(rows: list[dict], **thresholds) -> int | None:
    for t in range(len(rows)):
        if check_collapse(rows[: t + 1], **thresholds) is not None:
            return t
    return None


# ------------------------------------------------------------------------------------------ the rule
def test_a_learning_run_that_grows_more_consistent_stays_silent():
    """Co-RL-like (the default micro run): diversity and entropy both lose about a quarter, peer agreement rises."""
    rows = [{**r, "peer/agreement": a} for r, a in zip(series(ramp(50, 0.58, 0.69), ramp(50, 0.104, 0.076),
                                                               [21.0] * 50), ramp(50, 0.45, 0.65))]
    assert first_alarm(rows) is None
    rows = series(ramp(50, 0.55, 0.72), ramp(50, 0.10, 0.09), [21.0] * 50)  # consensus alone: not enough
    assert symptoms(rows)[0] == ["consensus"] and first_alarm(rows) is None


def test_majority_running_to_one_while_entropy_falls_fires_once_the_window_clears_the_baseline():
    """TTRL-like: consensus (diversity 0.45 -> 0.02) with entropy 0.10 -> 0.02 fires, at a step past the baseline."""
    rows = series([0.55] * 10 + ramp(40, 0.55, 0.98), [0.10] * 10 + ramp(40, 0.10, 0.02), [21.0] * 50)
    t = first_alarm(rows)
    assert t is not None and 15 <= t < 50
    found, signals = symptoms(rows[: t + 1])
    assert "consensus" in found and "entropy" in found
    assert signals["diversity"]["ratio"] <= 0.67 and signals["entropy"]["ratio"] <= 0.67


def test_consensus_while_independent_peers_agree_less_fires_as_divergence():
    """TTRL on two families (independent agents): one grows surer of its own answers as the pair agrees less."""
    rows = [{**r, "peer/agreement": a} for r, a in zip(series(ramp(40, 0.58, 0.78), [0.1] * 40, [21.0] * 40),
                                                       ramp(40, 0.31, 0.12))]
    hit = check_collapse(rows)
    assert hit is not None and set(hit[0]) == {"consensus", "divergence"}
    assert check_collapse(rows, agreement_drop=0.3) is None


def test_entropy_rising_without_any_gain_in_consensus_fires_as_dissolution():
    """Intuitor-like: the certainty reward climbs, token entropy rises by a quarter, answers agree no more."""
    rows = series([0.57] * 20 + ramp(30, 0.57, 0.52), [0.107] * 20 + ramp(30, 0.107, 0.135), [21.0] * 50)
    t = first_alarm(rows)
    assert t is not None and t >= 25
    found, _ = symptoms(rows[: t + 1])
    assert "entropy-rise" in found and "no-consensus" in found
    sharper = series(ramp(50, 0.57, 0.66), ramp(50, 0.107, 0.135), [21.0] * 50)  # entropy up, answers converge
    assert first_alarm(sharper) is None


def test_consensus_with_shrinking_length_fires_without_an_entropy_drop():
    rows = series(ramp(40, 0.5, 0.99), [0.1] * 40, ramp(40, 24.0, 8.0))
    hit = check_collapse(rows)
    assert hit is not None and set(hit[0]) == {"consensus", "length"}


@pytest.mark.parametrize("ratios,entropies,lengths", [
    (ramp(40, 0.5, 0.99), [0.1] * 40, [20.0] * 40),  # consensus alone
    ([0.5] * 40, ramp(40, 0.1, 0.01), ramp(40, 20.0, 5.0)),  # entropy and length without consensus
    (ramp(40, 0.5, 0.6), ramp(40, 0.1, 0.15), [20.0] * 40),  # entropy rises but answers converge
])
def test_one_symptom_family_alone_never_fires(ratios, entropies, lengths):
    assert first_alarm(series(ratios, entropies, lengths)) is None


def test_nothing_is_checked_before_the_window_clears_the_baseline():
    rows = series([0.5] * 5 + [1.0] * 4, [0.1] * 5 + [0.0] * 4, [20.0] * 9)
    assert symptoms(rows) == ([], {})
    assert check_collapse(rows + rows[-1:]) is not None  # step 9: window 5..9 does not overlap 0..4


def test_thresholds_are_shares_of_the_agents_own_baseline():
    """The same relative fall fires at any scale (entropy in nats of a 270k vocabulary or of a micro one)."""
    for scale in (0.01, 1.0, 100.0):
        rows = series(ramp(30, 0.6, 0.95), ramp(30, 1.0 * scale, 0.3 * scale), [20.0] * 30)
        assert first_alarm(rows) == first_alarm(series(ramp(30, 0.6, 0.95), ramp(30, 1.0, 0.3), [20.0] * 30))
    strict = first_alarm(series(ramp(30, 0.6, 0.95), ramp(30, 1.0, 0.3), [20.0] * 30), entropy_drop=0.2,
                         length_drop=0.2)
    assert strict is None  # entropy only fell to 0.3-0.4 of its baseline


def test_missing_values_and_a_zero_baseline_give_no_symptom():
    rows = [{"vote/majority_ratio": None, "policy/entropy": None, "len/mean": None} for _ in range(12)]
    assert check_collapse(rows) is None
    rows = series([1.0] * 12, [0.0] * 12, [20.0] * 12)  # nothing to fall from: diversity and entropy are 0
    found, signals = symptoms(rows)
    assert found == [] and signals["diversity"]["ratio"] is None


def test_the_alarm_reads_no_hidden_truth():
    """Scrambling the hidden-truth diagnostics changes nothing: the rule sees label-free signals only."""
    rows = series([0.55] * 10 + ramp(30, 0.55, 0.98), [0.1] * 10 + ramp(30, 0.1, 0.02), [21.0] * 40)
    rng = random.Random(0)
    scrambled = [{**r, **{k: rng.random() for k in HIDDEN}} for r in rows]
    dropped = [{k: v for k, v in r.items() if k not in HIDDEN} for r in rows]
    assert first_alarm(rows) == first_alarm(scrambled) == first_alarm(dropped) is not None


def test_the_monitor_fires_once_per_agent_and_a_replay_reaches_the_same_state():
    cfg = MonitorConfig()
    bad = series([0.55] * 10 + ramp(30, 0.55, 0.98), [0.1] * 10 + ramp(30, 0.1, 0.02), [21.0] * 40)
    good = series(ramp(40, 0.55, 0.7), [0.1] * 40, [21.0] * 40)
    history = [{"a0": b, "a1": g} for b, g in zip(bad, good)]
    live = CollapseMonitor(cfg)
    fired = [a for step, m in enumerate(history) for a in live.update(step, m)]
    assert [(a.agent, a.symptoms[0]) for a in fired] == [("a0", "consensus")]
    replayed = CollapseMonitor(cfg).replay(history)
    assert replayed == fired
    row0 = fired[0].row()
    assert row0["event"] == EVENT_NAME and row0["step"] == fired[0].step and Alarm.from_row(row0) == fired[0]
    assert row0["shape"] == "collapse"
    assert "a0 at step" in fired[0].text() and "diversity" in fired[0].text()
    assert "majority ratio" in describe_rule(cfg)


def _real_series():
    """agent key -> (per-step rows, hidden truth) of the default micro runs in tests/fixtures/collapse."""
    from pathlib import Path

    data = json.loads((Path(__file__).parent / "fixtures" / "collapse" / "micro_series.json").read_text())
    out = {}
    for key, entry in data["runs"].items():
        names = [k for k in entry if k != "truth"]
        steps = len(entry[names[0]])
        out[key] = ([{k: entry[k][t] for k in names} for t in range(steps)], entry["truth"])
    return out


def test_on_the_real_micro_runs_it_fires_on_every_collapse_and_stays_silent_on_co_rl():
    """The default rule on the stored label-free series of real 50-step micro runs (seed 0): it fires on each agent
    whose final pass@1 or greedy fell below half of base (TTRL's qwen2 as collapse, Intuitor as dissolution) and on
    none of Co-RL cross-family's agents (the default run must stay bit-identical). Degraded-but-not-collapsed agents
    (RENT, random reward, TTRL's llama) are allowed either way; here it stays silent on them."""
    cfg = MonitorConfig()
    fired = {}
    for key, (rows, truth) in _real_series().items():
        monitor = CollapseMonitor(cfg)
        alarms = [a for step, row in enumerate(rows) for a in monitor.update(step, {key: row})]
        fired[key] = alarms[0] if alarms else None
        collapsed = any(after < 0.5 * before for before, after in truth.values())
        if collapsed:
            assert fired[key] is not None, key
    assert fired["corl-cross-family/a0-qwen2-bpe"] is None and fired["corl-cross-family/a1-llama-bpe"] is None
    assert fired["ttrl-cross-family/a0-qwen2-bpe"].shape == "collapse"
    assert fired["intuitor-single/a0-qwen2-bpe"].shape == "dissolution"
    assert sorted(k for k, a in fired.items() if a) == ["intuitor-single/a0-qwen2-bpe", "ttrl-cross-family/a0-qwen2-bpe"]


# ------------------------------------------------------------------------------------------ config
@pytest.mark.parametrize("override,message", [
    ("monitor.diversity_drop=1.2", r"monitor.diversity_drop must be in \(0, 1\).*set e.g. monitor.diversity_drop=0.67"),
    ("monitor.entropy_rise=0.9", r"monitor.entropy_rise must be > 1.*set e.g. monitor.entropy_rise=1.2"),
    ("monitor.window=0", r"monitor.window must be > 0 .*monitor.window=5"),
    ("monitor.baseline_steps=-1", r"monitor.baseline_steps must be > 0"),
    ("monitor.collapse_alarm=maybe", r"monitor.collapse_alarm must be true or false"),
    ("run.stop_on_collapse=1", r"run.stop_on_collapse must be true or false"),
])
def test_bad_monitor_settings_are_refused_naming_the_fix(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, [override])


def test_validate_refuses_a_stop_that_cannot_happen(tmp_path):
    from corl_bench.train.runner import resolve

    out = f"run.output_dir={tmp_path}"
    with pytest.raises(ConfigError, match="run.stop_on_collapse=true needs the collapse alarm; set "
                                          "monitor.collapse_alarm=true"):
        resolve(load_config(None, ["run.stop_on_collapse=true", "monitor.collapse_alarm=false", out]))
    with pytest.raises(ConfigError, match="cannot fire within run.steps=6"):
        resolve(load_config(None, ["run.stop_on_collapse=true", "run.steps=6", out]))
    defaults = load_config(None, [out])
    assert defaults.monitor.collapse_alarm and not defaults.run.stop_on_collapse
    resolve(defaults)


# ------------------------------------------------------------------------------------------ event rows
def _events_run(tmp_path):
    rd = RunDir(tmp_path / "run")
    steps = [{"step": s, "agent": a, "reward/mean": 0.5, "vote/majority_ratio": 0.5} for s in range(3)
             for a in ("a0", "a1")]
    append_jsonl(rd.metrics_path, steps[:4])
    append_jsonl(rd.metrics_path, [{"step": 1, "agent": "a0", "event": EVENT_NAME, "symptoms": ["consensus"],
                                    "signals": {}}])
    append_jsonl(rd.metrics_path, steps[4:])
    (rd.path / "run.json").write_text(json.dumps({"method": "ttrl", "cohort": "single", "agents": [
        {"name": "a0"}, {"name": "a1"}], "status": "finished", "steps": 3}))
    return rd, steps


def test_readers_of_step_metrics_skip_event_rows_and_the_fingerprint_keeps_them(tmp_path):
    from corl_bench.report.plots import _load_metrics
    from corl_bench.train.resume import restore_history as _history

    rd, steps = _events_run(tmp_path)
    assert rd.metrics() == steps and not any(is_event(r) for r in rd.metrics())
    assert [e["event"] for e in rd.events()] == [EVENT_NAME]
    plotted = _load_metrics(rd.path)
    assert plotted["a0"][1] == steps[2]  # the step row, not the alarm of the same (step, agent)
    raw = [json.loads(x) for x in rd.metrics_path.read_text().splitlines()]
    assert sum(is_event(r) for r in raw) == 1  # kept in the file: results, compared by run_fingerprint
    history = _history(rd.path, start=2)  # a resume at step 2 keeps the alarm of step 1 in the file
    assert [sorted(h) for h in history] == [["a0", "a1"], ["a0", "a1"]]
    assert all(not is_event(r) for h in history for r in h.values())
    assert len(rd.events()) == 1 and len(rd.metrics()) == 4


def _cfg(*overrides: str):
    return load_config(None, list(overrides))


def test_the_watch_writes_one_event_row_records_it_in_run_json_and_says_it(tmp_path):
    rd = RunDir(tmp_path)
    watch = CollapseWatch(_cfg(), rd.metrics_path)
    assert watch.changes() == {"collapse_alarms": ()}
    said: list[str] = []
    bad = series([0.55] * 10 + ramp(30, 0.55, 0.98), [0.1] * 10 + ramp(30, 0.1, 0.02), [21.0] * 40)
    stops = [watch.observe(s, {"a0-qwen2-bpe": r}, say=said.append) for s, r in enumerate(bad)]
    assert not any(stops) and not watch.stopped  # stop_on_collapse is off by default
    assert len(rd.events()) == 1 and len(watch.changes()["collapse_alarms"]) == 1
    assert said and said[0].startswith("collapse alarm: a0-qwen2-bpe at step") and "collapse, consensus" in said[0]
    assert watch.status() == "  ALARM a0"
    assert watch.alarm_steps() == {"a0-qwen2-bpe": rd.events()[0]["step"]}


def test_stop_on_collapse_stops_at_the_alarm_and_a_replay_of_that_history_stays_stopped(tmp_path):
    rd = RunDir(tmp_path)
    cfg = _cfg("run.stop_on_collapse=true")
    watch = CollapseWatch(cfg, rd.metrics_path)
    bad = series([0.55] * 10 + ramp(30, 0.55, 0.98), [0.1] * 10 + ramp(30, 0.1, 0.02), [21.0] * 40)
    history = []
    for s, r in enumerate(bad):
        history.append({"a0": r})
        if watch.observe(s, {"a0": r}):
            break
    info = watch.changes()
    assert watch.stopped and info["stopped"] == "collapse" and info["stopped_after_step"] == s + 1
    again = CollapseWatch(cfg, rd.metrics_path)
    again.replay(history)
    assert again.stopped and again.changes()["stopped_after_step"] == s + 1
    assert len(rd.events()) == 1  # a replay writes nothing
    off = CollapseWatch(_cfg("monitor.collapse_alarm=false"), rd.metrics_path)
    assert not off.observe(0, {"a0": bad[0]}) and off.status() == "" and off.changes() == {}


# ------------------------------------------------------------------------------------------ display
def test_the_summary_states_the_alarm_the_stop_and_the_checkpoint():
    from corl_bench.train.progress import run_notes, summary_table

    alarm = Alarm(23, "a0-qwen2-bpe", ("consensus", "entropy"),
                  {"diversity": {"baseline": 0.45, "now": 0.04, "ratio": 0.09}}).row()
    info = {"method": "ttrl", "cohort": "single", "seed": 0, "run_id": "r", "steps": 50, "timings": {},
            "collapse_alarms": [alarm], "stopped": "collapse", "stopped_after_step": 24}
    out = io.StringIO()
    summary_table(Console(file=out, width=80, force_terminal=False), RunRecord.from_dict(info), {}, [])
    text = out.getvalue()
    assert "collapse alarm: a0-qwen2-bpe at step 23: collapse, consensus + entropy (diversity 0.45 -> 0.04)" in text
    assert "stopped early after 24 of 50 steps on the collapse alarm" in text
    assert run_notes(RunRecord(collapse_alarms=()))[0].startswith("collapse alarm: silent")
    assert run_notes(RunRecord())[0].startswith("collapse alarm: off")
    assert run_notes(RunRecord(collapse_alarms=()))[-1] == "checkpoint: final"


@pytest.mark.parametrize("terminal", [False, True])
def test_the_progress_display_shows_the_alarm_in_logs_and_in_a_terminal(terminal):
    from corl_bench.train.progress import RunProgress

    out = io.StringIO()
    with RunProgress(Console(file=out, width=160, force_terminal=terminal)) as prog:
        task = prog.add("train", 4)
        prog.advance(task, 1, status="a0 r=0.90")
        prog.alarm("collapse alarm: a0 at step 1: consensus + entropy")
        prog.advance(task, 1, status="a0 r=0.95  ALARM a0")
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())
    assert "collapse alarm: a0 at step 1: consensus + entropy" in text
    assert "ALARM a0" in text or not terminal  # the bar's status in a terminal; logs print every 10 %


# ------------------------------------------------------------------------------------------ a clean stop, end to end
@pytest.mark.slow
def test_a_run_stops_cleanly_on_the_alarm_and_its_resume_goes_straight_to_the_final_evaluation(tmp_path,
                                                                                                monkeypatch):
    """Tiny agents, 4 steps, the rule forced to fire at step 1: the run finishes step 1, checkpoints, evaluates
    final and ends ``finished`` with ``stopped: collapse``; a crash during that final evaluation resumes into the
    final evaluation only (no further step) and gives the same predictions."""
    import shutil

    from corl_bench.registries import FAMILIES
    from corl_bench.train import monitor
    from corl_bench.train.checkpoint import latest_checkpoint
    from corl_bench.train.runner import run
    from tests.conftest import tiny_family

    for name in ("qwen2-bpe", "neox-bpe"):
        fam = tiny_family(name, warmstart_steps=2, warmstart_batch=8)
        if fam.name not in FAMILIES:
            FAMILIES.register(fam.name, fam)
    monkeypatch.setattr(monitor, "check_collapse",
                        lambda rows, **kw: (("consensus", "entropy"), {}) if len(rows) >= 2 else None)
    cfg = load_config(None, [
        "method.name=corl", "cohort.name=tiny-cross",
        "cohort.agents=[{name: a0, family: tiny-qwen2-bpe}, {name: a1, family: tiny-neox-bpe, seed_offset: 1}]",
        "run.steps=4", f"run.output_dir={tmp_path / 'runs'}", f"model.cache_dir={tmp_path / 'cache'}",
        "rollout.prompts_per_step=2", "rollout.samples_per_prompt=2", "rollout.max_new_tokens=8",
        "eval.max_problems=4", "eval.samples=2", "eval.max_new_tokens=8", "run.save_checkpoints=false",
        "run.stop_on_collapse=true", "monitor.baseline_steps=1", "monitor.window=1", "run.checkpoint_every=3"])
    out = io.StringIO()
    rd = RunDir(run(cfg, console=Console(file=out, width=160, force_terminal=False)))
    info = rd.info()
    assert info["status"] == "finished" and info["stopped"] == "collapse" and info["stopped_after_step"] == 2
    assert {(r["step"], r["agent"]) for r in rd.metrics()} == {(s, a) for s in (0, 1) for a in ("a0", "a1")}
    assert [(e["step"], e["agent"]) for e in rd.events()] == [(1, "a0"), (1, "a1")]
    assert [a["agent"] for a in info["collapse_alarms"]] == ["a0", "a1"]
    assert latest_checkpoint(rd.path).name == "step-000002"  # the stop step, off the checkpoint_every grid
    assert info["phases"] == ["base", "final"]
    text = out.getvalue()
    assert "collapse alarm: a0 at step 1: collapse, consensus + entropy; stopping the run (run.stop_on_collapse)" \
        in text
    assert "stopped early after 2 of 4 steps on the collapse alarm" in text
    final = {p.name: p.read_text() for p in (rd.eval_root / "final").rglob("*.jsonl")}

    info.update(status="running")  # as if killed during the final evaluation
    rd.info_path.write_text(json.dumps(info))
    shutil.rmtree(rd.eval_root / "final")
    metrics_before = rd.metrics_path.read_text()
    run(cfg, resume=rd.path, console=Console(file=io.StringIO(), force_terminal=False))
    again = rd.info()
    assert again["status"] == "finished" and again["stopped_after_step"] == 2
    assert rd.metrics_path.read_text() == metrics_before  # no step ran, no alarm was logged twice
    assert {p.name: p.read_text() for p in (rd.eval_root / "final").rglob("*.jsonl")} == final
