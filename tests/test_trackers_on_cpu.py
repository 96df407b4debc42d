"""Experiment trackers (``run.trackers``): TensorBoard event files and an offline W&B run hold the same per-step
values as metrics.jsonl and every evaluation point at its step; the W&B run's init arguments (project, name, id
from the run directory for resume, offline without an API key); validate refuses a tracker that is not installed."""

from __future__ import annotations

import importlib.util
import json
import logging
import sys
import types
from pathlib import Path

import pytest
from typer.testing import CliRunner

from corl_bench.config import load_config
from corl_bench.registries import FAMILIES
from tests.conftest import tiny_family

STEPS, EVAL_EVERY = 3, 2
INSTALLED = [t for t in ("tensorboard", "wandb") if importlib.util.find_spec(t) is not None]


def tiny_config(root: Path, *sets: str):
    for name in ("qwen2-bpe", "neox-bpe"):
        fam = tiny_family(name, warmstart_steps=2, warmstart_batch=8)
        if fam.name not in FAMILIES:
            FAMILIES.register(fam.name, fam)
    return load_config(None, [
        "method.name=corl", "cohort.name=tiny-pair",
        "cohort.agents=[{name: a0, family: tiny-qwen2-bpe}, {name: a1, family: tiny-neox-bpe, seed_offset: 1}]",
        f"run.steps={STEPS}", f"eval.every={EVAL_EVERY}", "run.checkpoint_every=0", "run.save_checkpoints=false",
        f"run.output_dir={root / 'runs'}", f"model.cache_dir={root / 'cache'}", "rollout.prompts_per_step=2",
        "rollout.samples_per_prompt=4", "rollout.max_new_tokens=8", "eval.max_problems=2", "eval.samples=2",
        "eval.max_new_tokens=8", *sets])


@pytest.fixture(scope="module")
def tracked_run(tmp_path_factory):
    """One tiny Co-RL run (3 steps, evaluations base / step-000002 / final) with every installed tracker."""
    if not INSTALLED:
        pytest.skip("neither tensorboard nor wandb is installed (pip install 'corl-bench[trackers]')")
    from corl_bench.train.runner import run

    root = tmp_path_factory.mktemp("trackers")
    with pytest.MonkeyPatch.context() as m:
        for var, value in {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DIR": root / "wandb-dir",
                           "WANDB_CONFIG_DIR": root / "wandb-config", "WANDB_CACHE_DIR": root / "wandb-cache",
                           "WANDB_DATA_DIR": root / "wandb-data"}.items():
            m.setenv(var, str(value))
        run_dir = run(tiny_config(root, f"run.trackers=[{', '.join(INSTALLED)}]"), auto_resume=False)
    return run_dir


def expected(run_dir: Path) -> tuple[dict[tuple[str, int], float], dict[tuple[str, int], float]]:
    """From the run's own files: {(tag, step): value} of the metrics rows and of the evaluation points."""
    from corl_bench.eval.evaluator import load_scores
    from corl_bench.train.trackers import eval_scalars, step_scalars
    from corl_bench.results import phase_step

    steps = {}
    for row in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines()):
        steps.update({(tag, row["step"]): v for tag, v in step_scalars([row]).items()})
    evals = {}
    for phase in ("base", f"step-{EVAL_EVERY:06d}", "final"):
        scores = {a: load_scores(run_dir / "eval" / phase / a, {"micro-test": None}) for a in ("a0", "a1")}
        evals.update({(tag, phase_step(phase, STEPS)): v for tag, v in eval_scalars(scores).items()})
    return steps, evals


@pytest.mark.slow
def test_tensorboard_scalars_equal_metrics_jsonl_and_the_evaluation_points(tracked_run):
    pytest.importorskip("tensorboard", reason="tensorboard is not installed (pip install tensorboard)")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tracked_run / "tensorboard"), size_guidance={"scalars": 0})
    acc.Reload()
    logged = {(tag, ev.step): ev.value for tag in acc.Tags()["scalars"] for ev in acc.Scalars(tag)}
    steps, evals = expected(tracked_run)
    assert {s for _, s in steps} == set(range(STEPS)) and {s for _, s in evals} == {0, EVAL_EVERY, STEPS}
    assert "a0/reward/mean" in {t for t, _ in steps} and "eval/a1/micro-test/greedy" in {t for t, _ in evals}
    assert set(logged) == set(steps) | set(evals)
    for key, value in {**steps, **evals}.items():
        assert logged[key] == pytest.approx(value, rel=1e-6, abs=1e-7), key  # event files hold float32


def wandb_records(path: Path):
    """The records of a .wandb file (a LevelDB-style log: 7-byte file header, 32 KiB blocks, 7-byte record
    headers crc32c / length / type 1 full, 2 first, 3 middle, 4 last)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, pos, buf, block = path.read_bytes(), 7, b"", 32768
    assert data[:4] == b":W&B", data[:7]
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # the block's tail is padding
            pos += block - pos % block
            continue
        length, kind = int.from_bytes(data[pos + 4:pos + 6], "little"), data[pos + 6]
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        buf = chunk if kind in (1, 2) else buf + chunk
        if kind in (1, 4):
            rec = pb.Record()
            rec.ParseFromString(buf)
            yield rec


@pytest.mark.slow
def test_wandb_offline_run_holds_metrics_jsonl_and_the_evaluation_points(tracked_run):
    pytest.importorskip("wandb", reason="wandb is not installed (pip install wandb)")
    (wandb_file,) = (tracked_run / "wandb").glob("offline-run-*/run-*.wandb")
    records = list(wandb_records(wandb_file))
    (info,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert info.run_id == info.display_name == tracked_run.name and info.project == "corl-bench"
    logged = {}
    for r in records:
        if r.WhichOneof("record_type") == "history":
            row = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in r.history.item}
            logged.update({(k, row["step"]): v for k, v in row.items() if k not in ("step", "_step", "_runtime",
                                                                                    "_timestamp")})
    steps, evals = expected(tracked_run)
    assert set(logged) == set(steps) | set(evals)
    for key, value in {**steps, **evals}.items():
        assert logged[key] == pytest.approx(value), key


class FakeWandb(types.ModuleType):
    """Records what the tracker asks of ``wandb``."""

    def __init__(self) -> None:
        super().__init__("wandb")
        self.calls: list[tuple] = []

    def Settings(self, **kw):  # noqa: N802 - wandb's name
        return ("settings", kw)

    def init(self, **kw):
        self.calls.append(("init", kw))
        fake = self

        class Run:
            def define_metric(self, name, **kw):
                fake.calls.append(("define_metric", name, kw))

            def log(self, data):
                fake.calls.append(("log", data))

            def finish(self):
                fake.calls.append(("finish",))

        return Run()


@pytest.mark.parametrize("env, offline", [({}, True), ({"WANDB_API_KEY": "k" * 40}, False),
                                          ({"WANDB_MODE": "online"}, False)])
def test_wandb_tracker_init_arguments_and_logged_values(tmp_path, monkeypatch, caplog, env, offline):
    from corl_bench.eval.metrics import BenchmarkScores
    from corl_bench.train.trackers import open_trackers

    fake = FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "wandb" else real(name, *a))
    for var in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_PROJECT", "WANDB_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    cfg = tiny_config(tmp_path, "run.trackers=[wandb]")
    run_dir = tmp_path / "runs" / "corl-tiny-pair-s0-20250101-000000"
    with caplog.at_level(logging.INFO, logger="corl_bench.train.trackers"):
        (tracker,) = open_trackers(cfg, run_dir)
    tracker.log_step(4, [{"step": 4, "agent": "a0", "reward/mean": 0.5, "label/accuracy": None, "loss": 1}])
    sc = BenchmarkScores(n_problems=2, greedy=0.5, avg_k=0.25, maj_k=None, pass_k=1.0, k=2, extraction_failure=0.0,
                         clipped=0.0)
    tracker.log_eval("final", 5, {"a0": {"micro-test": sc}})
    tracker.close()
    (_, init), *rest = fake.calls
    assert init["dir"] == str(run_dir) and init["project"] == "corl-bench" and init["resume"] == "allow"
    assert init["name"] == init["id"] == run_dir.name and init["config"] == cfg.to_dict()
    assert init.get("mode") == ("offline" if offline else None)
    assert ("offline" in caplog.text) == offline
    logs = [c[1] for c in rest if c[0] == "log"]
    assert logs[0] == {"step": 4, "a0/reward/mean": 0.5, "a0/loss": 1.0}
    assert logs[1]["step"] == 5 and logs[1]["eval/a0/micro-test/greedy"] == 0.5
    assert "eval/a0/micro-test/maj_k" not in logs[1] and rest[-1] == ("finish",)


def test_phase_steps():
    from corl_bench.results import phase_step

    assert [phase_step(p, 50) for p in ("base", "step-000020", "final")] == [0, 20, 50]


@pytest.mark.parametrize("tracker", ["wandb", "tensorboard"])
def test_validate_refuses_a_tracker_that_is_not_installed(tracker, tmp_path, monkeypatch):
    from corl_bench.cli import app

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == tracker else real(name, *a))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CORL_BENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("COLUMNS", "400")
    res = CliRunner().invoke(app, ["validate", "--set", f"run.trackers=[{tracker}]"])
    lines = [ln for ln in res.output.strip().splitlines() if ln.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and f"pip install {tracker}" in lines[0], res.output
    assert list(tmp_path.iterdir()) == []  # nothing written
