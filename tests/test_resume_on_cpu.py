"""Resume: a run interrupted at any point and resumed ends bit-identical to an uninterrupted one (metrics, samples,
predictions, weights); interrupted checkpoint writes are ignored; a changed config is refused; an interrupted run
with the same config is found and resumed; NaN stops a run with a diagnosis and keeps the last checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corl_bench.config import ConfigError, load_config
from corl_bench.registries import FAMILIES
from tests.conftest import tiny_family

pytestmark = pytest.mark.slow
STEPS = 4


class Interrupt(Exception):
    """Stands in for a crash (SIGKILL is exercised by scripts/kill_test.py)."""


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    for name in ("qwen2-bpe", "neox-bpe"):
        fam = tiny_family(name, warmstart_steps=4, warmstart_batch=16)
        if fam.name not in FAMILIES:
            FAMILIES.register(fam.name, fam)
    return tmp_path_factory.mktemp("resume")


def config(root: Path, out: str, method: str = "corl", **extra):
    sets = [f"method.name={method}", "cohort.name=tiny-pair",
            "cohort.agents=[{name: a0, family: tiny-qwen2-bpe}, {name: a1, family: tiny-neox-bpe, seed_offset: 1}]",
            f"run.steps={STEPS}", "run.checkpoint_every=1", f"run.output_dir={root / out}",
            f"model.cache_dir={root / 'cache'}", "run.log_samples_every=1", "rollout.prompts_per_step=3",
            "rollout.samples_per_prompt=4", "rollout.max_new_tokens=10", "eval.max_problems=4", "eval.samples=2",
            "eval.max_new_tokens=10", "grpo.lr=1e-3"] + [f"{k}={v}" for k, v in extra.items()]
    return load_config(None, sets)


def fingerprint(run_dir: Path) -> dict:
    from corl_bench.train.checkpoint import run_fingerprint
    fp = run_fingerprint(run_dir)
    assert set(fp["weights"]) == {"a0", "a1"} and fp["metrics"] and fp["predictions"]
    return fp


def same(a: dict, b: dict) -> bool:
    from corl_bench.train.checkpoint import fingerprint_diff
    return fingerprint_diff(a, b) == []


@pytest.fixture(scope="module")
def reference(root):
    from corl_bench.train.runner import run
    return fingerprint(run(config(root, "reference")))


def interrupted_run(root, out, monkeypatch, *, at_step=None, in_final_eval=False, method="corl", **extra):
    """Start a run that crashes at ``at_step`` (before that step) or inside the final evaluation."""
    import corl_bench.eval.evaluator as evaluation
    from corl_bench.train.runner import run
    from corl_bench.train.trainer import Trainer

    original_step, original_eval = Trainer.step, evaluation.evaluate

    def step(self, s):
        if s == at_step:
            raise Interrupt(f"crash before step {s}")
        return original_step(self, s)

    def evaluate(generate, spec, items, *, out_path, **kw):
        if in_final_eval and Path(out_path).parent.parent.name == "final":
            raise Interrupt("crash in the final evaluation")
        return original_eval(generate, spec, items, out_path=out_path, **kw)

    with monkeypatch.context() as m:
        m.setattr(Trainer, "step", step)
        m.setattr(evaluation, "evaluate", evaluate)
        with pytest.raises(Interrupt):
            run(config(root, out, method=method, **extra))
    (run_dir,) = list((root / out).iterdir())
    assert json.loads((run_dir / "run.json").read_text())["status"] == "failed"
    return run_dir


@pytest.mark.parametrize("at_step", [1, 3])
def test_resume_after_a_crash_mid_training_is_bit_identical(root, reference, monkeypatch, at_step):
    from corl_bench.train.runner import run

    run_dir = interrupted_run(root, f"mid-{at_step}", monkeypatch, at_step=at_step)
    # rows written after the last checkpoint are dropped on resume; here the crash came right after one
    resumed = run(config(root, f"mid-{at_step}"), resume=run_dir)
    assert resumed == run_dir and json.loads((run_dir / "run.json").read_text())["status"] == "finished"
    assert same(fingerprint(run_dir), reference)


def test_crash_during_the_final_evaluation_resumes_without_retraining(root, reference, monkeypatch):
    from corl_bench.train.runner import run

    run_dir = interrupted_run(root, "final-eval", monkeypatch, in_final_eval=True)
    before = (run_dir / "metrics.jsonl").read_text()
    run(config(root, "final-eval"), resume=run_dir)
    assert (run_dir / "metrics.jsonl").read_text() == before
    assert same(fingerprint(run_dir), reference)


def test_an_interrupted_checkpoint_write_is_ignored_and_the_previous_one_used(root, reference, monkeypatch):
    from corl_bench.train.checkpoint import latest_checkpoint
    from corl_bench.train.runner import run

    run_dir = interrupted_run(root, "torn-ckpt", monkeypatch, at_step=3)
    ckpts = run_dir / "checkpoints"
    assert latest_checkpoint(run_dir).name == "step-000003"
    # what a kill during the write of step 3's successor leaves: a temp folder and a folder without COMPLETE
    (ckpts / ".tmp-step-000004-12345").mkdir()
    (ckpts / ".tmp-step-000004-12345" / "agent-a0.pt").write_bytes(b"half")
    bad = ckpts / "step-000004"
    bad.mkdir()
    (bad / "state.pt").write_bytes(b"torn")
    assert latest_checkpoint(run_dir).name == "step-000003"
    run(config(root, "torn-ckpt"), resume=run_dir)
    assert same(fingerprint(run_dir), reference)


def test_same_config_finds_and_resumes_the_interrupted_run(root, reference, monkeypatch):
    from corl_bench.train.runner import run

    run_dir = interrupted_run(root, "auto", monkeypatch, at_step=2)
    assert run(config(root, "auto")) == run_dir  # no --resume: found by its config
    assert same(fingerprint(run_dir), reference)
    assert run(config(root, "auto"), resume=run_dir) == run_dir  # finished: nothing to do
    assert same(fingerprint(run_dir), reference)


def test_resuming_with_a_changed_config_is_refused_naming_the_change(root, monkeypatch):
    from corl_bench.train.runner import run
    from corl_bench.train.resume import check_resumable

    run_dir = interrupted_run(root, "changed", monkeypatch, at_step=2)
    changed = config(root, "changed", **{"grpo.lr": "5e-4", "run.steps": 6})
    with pytest.raises(ConfigError, match=r"config changed: grpo.lr \(0.001 -> 0.0005\); run.steps \(4 -> 6\)"):
        check_resumable(run_dir, changed)
    with pytest.raises(ConfigError, match="config changed"):
        run(changed, resume=run_dir)
    # and a new run with another config does not pick the interrupted one up
    assert run(changed) != run_dir


def test_trainer_stream_position_is_restored_exactly(root):
    from corl_bench.micro.profile import MicroProfile
    from corl_bench.train.trainer import Trainer

    cfg = config(root, "stream")
    profile = MicroProfile(cfg.model)
    a = Trainer(cfg, [], type("M", (), {"state_dict": lambda s: {}, "load_state_dict": lambda s, x: None})(),
                profile, root)
    first = [next(a.stream).id for _ in range(7)]
    b = Trainer(cfg, [], a.method, profile, root)
    b.load_state_dict({"consumed": 5, "method": {}})
    assert next(b.stream).id == first[5] and b.consumed == 5


def test_non_finite_rewards_stop_the_run_naming_agent_step_and_quantity(root, monkeypatch):
    from corl_bench.train.agent import NumericalError
    from corl_bench.train.checkpoint import latest_checkpoint
    from corl_bench.registries import METHODS
    from corl_bench.train.runner import run

    cls = METHODS.get("corl")
    original = cls.rewards

    def poisoned(self, batch):
        out = original(self, batch)
        if batch.step == 2:
            out["a1"].rewards[0][0] = float("nan")
        return out

    monkeypatch.setattr(cls, "rewards", poisoned)
    with pytest.raises(NumericalError, match=r"non-finite rewards \(agent a1, step 2\)"):
        run(config(root, "nan"))
    (run_dir,) = list((root / "nan").iterdir())
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "failed" and "agent a1, step 2" in info["error"]
    assert latest_checkpoint(run_dir).name == "step-000002"  # the last good one, untouched


def test_disk_full_gives_a_message_and_the_run_resumes_after(root, reference, monkeypatch):
    import errno

    import corl_bench.train.trainer as trainer_mod
    from corl_bench.train.runner import run
    from corl_bench.train.session import ResourceError

    original = trainer_mod.append_jsonl
    calls = {"n": 0}

    def full_disk(path, rows):
        calls["n"] += 1
        if calls["n"] == 5:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return original(path, rows)

    with monkeypatch.context() as m:
        m.setattr(trainer_mod, "append_jsonl", full_disk)
        with pytest.raises(ResourceError, match=r"disk full while writing .*metrics.jsonl; free space .* resume "
                                                 r"with: corl-bench run --resume"):
            run(config(root, "disk"))
    (run_dir,) = list((root / "disk").iterdir())
    run(config(root, "disk"), resume=run_dir)
    assert same(fingerprint(run_dir), reference)


def test_out_of_memory_during_generation_names_the_knobs_and_resumes(root, reference, monkeypatch):
    from corl_bench.train.agent import Agent
    from corl_bench.train.runner import run
    from corl_bench.train.session import ResourceError

    original = Agent.generate
    calls = {"n": 0}

    def oom(self, prompts, params, **kw):
        calls["n"] += 1
        if calls["n"] == 6:
            raise RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory: "
                               "you tried to allocate 123 bytes. Error code 12 (Cannot allocate memory) out of memory")
        return original(self, prompts, params, **kw)

    with monkeypatch.context() as m:
        m.setattr(Agent, "generate", oom)
        with pytest.raises(ResourceError, match="out of memory; lower rollout.prompts_per_step"):
            run(config(root, "oom"))
    (run_dir,) = list((root / "oom").iterdir())
    run(config(root, "oom"), resume=run_dir)
    assert same(fingerprint(run_dir), reference)


def test_unwritable_results_directory_is_a_one_line_error(root, tmp_path):
    from corl_bench.train.runner import run

    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    cfg = config(root, "x")
    with pytest.raises(ConfigError, match="cannot create results directory .* set run.output_dir to a writable"):
        run(load_config(None, [f"run.output_dir={blocker / 'runs'}"]).replace(model=cfg.model, cohort=cfg.cohort,
                                                                              method=cfg.method))


def test_resume_at_a_data_epoch_boundary_is_bit_identical(root, monkeypatch):
    """A fixed pool of 6 problems read 3 per step: steps 0-1 are epoch 0, steps 2-3 epoch 1 (a new order).
    A crash right at the boundary (before step 2) and inside epoch 1 (before step 3) resume to the same end."""
    from corl_bench.train.runner import run

    pool = {"data.train_pool": 6}
    ref = fingerprint(run(config(root, "epoch-ref", **pool)))
    for at_step in (2, 3):
        out = f"epoch-{at_step}"
        run_dir = interrupted_run(root, out, monkeypatch, at_step=at_step, **pool)
        run(config(root, out, **pool), resume=run_dir)
        assert same(fingerprint(run_dir), ref), f"resume before step {at_step} differs"


def test_a_training_pool_is_read_in_reshuffled_epochs(root):
    from corl_bench.micro.profile import MicroProfile
    from corl_bench.train.trainer import Trainer

    cfg = config(root, "pool", **{"data.train_pool": 5})
    method = type("M", (), {"state_dict": lambda s: {}, "load_state_dict": lambda s, x: None})()
    a = Trainer(cfg, [], method, MicroProfile(cfg.model), root)
    ids = [next(a.stream).id for _ in range(15)]
    epochs = [ids[0:5], ids[5:10], ids[10:15]]
    assert all(sorted(e) == sorted(epochs[0]) for e in epochs) and len(set(map(tuple, epochs))) == 3
    b = Trainer(cfg, [], method, MicroProfile(cfg.model), root)
    b.load_state_dict({"consumed": 7, "method": {}})
    assert [next(b.stream).id for _ in range(8)] == ids[7:15]
    with pytest.raises(ConfigError, match="data.train_pool must be >= 0"):
        config(root, "pool", **{"data.train_pool": -1})


def test_a_run_written_before_a_config_field_existed_still_resumes(tmp_path):
    """config.yaml of an older version lacks fields added since; they take their defaults and the run resumes."""
    import yaml

    from corl_bench.config import load_config
    from corl_bench.train.resume import check_resumable, config_diff, stored_config

    cfg = load_config(None, ["run.steps=3"])
    old = cfg.to_dict()
    del old["rollout"]["backend"], old["eval"]["every"]  # as if written before these fields existed
    for agent in old["cohort"]["agents"] or []:
        agent.pop("seed_offset", None)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(yaml.safe_dump(old))
    (run_dir / "run.json").write_text('{"status": "running"}')
    assert config_diff(stored_config(run_dir), cfg.to_dict()) == []
    assert check_resumable(run_dir, cfg).status == "running"
    changed = load_config(None, ["run.steps=3", "eval.every=5"])
    with pytest.raises(Exception, match="eval.every"):
        check_resumable(run_dir, changed)


def test_a_run_started_before_cohorts_named_their_paper_row_still_resumes(tmp_path):
    """cohort.paper_row only says how a run is labelled: a run directory written before the cross-family cohort
    named its paper row (config.yaml without it, run.json without it) is found and resumed, and keeps its record."""
    import dataclasses
    import json

    import yaml

    from corl_bench.config import load_config
    from corl_bench.train.runner import resolve
    from corl_bench.train.resume import check_resumable, find_interrupted

    cfg = resolve(load_config(None, ["run.steps=3", f"run.output_dir={tmp_path}"])).config
    assert cfg.cohort.name == "cross-family" and cfg.cohort.paper_row == "different-family"
    old = cfg.to_dict()
    del old["cohort"]["paper_row"]
    run_dir = tmp_path / "corl-cross-family-s0-old"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(yaml.safe_dump(old))
    (run_dir / "run.json").write_text(json.dumps({"status": "running", "cohort": "cross-family"}))
    assert find_interrupted(tmp_path, cfg) == run_dir
    assert check_resumable(run_dir, cfg).paper_row is None
    with pytest.raises(Exception, match="run.steps"):  # a field that trains differently still refuses
        check_resumable(run_dir, cfg.replace(run=dataclasses.replace(cfg.run, steps=4)))
