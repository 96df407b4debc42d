"""``run.backend=ray`` on a local Ray (CPU): one actor per agent gives metrics, samples, predictions and weights
identical to the in-process backend; a Ray run killed with SIGKILL resumes from its checkpoint to the same end; the
sweep runs its cells as Ray tasks with the same results as one process; no tensor of model or optimiser state reaches
the controller during a Ray run with checkpoints (the actors write and read them)."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from corl_bench.config import load_config
from corl_bench.registries import FAMILIES
from tests.conftest import tiny_family

ray = pytest.importorskip("ray", reason="run.backend=ray needs Ray (pip install -e '.[ray]'); the test extra has it")
pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
STEPS = 4
FAMS = ("qwen2-bpe", "neox-bpe")


def _register() -> None:
    """This module's own family names: another module may have registered ``tiny-qwen2-bpe`` with other settings
    in this process, and the driver subprocess of the kill test must build exactly the same families."""
    for name in FAMS:
        fam = dataclasses.replace(tiny_family(name, warmstart_steps=4, warmstart_batch=16), name=f"raytest-{name}")
        if fam.name not in FAMILIES:
            FAMILIES.register(fam.name, fam)


def _sets(root: Path, out: str, backend: str) -> list[str]:
    return ["method.name=corl", "cohort.name=tiny-pair",
            "cohort.agents=[{name: a0, family: raytest-qwen2-bpe}, {name: a1, family: raytest-neox-bpe, seed_offset: 1}]",
            f"run.steps={STEPS}", "run.checkpoint_every=1", f"run.output_dir={root / out}", "run.run_id=r",
            f"model.cache_dir={root / 'cache'}", "run.log_samples_every=1", "rollout.prompts_per_step=3",
            "rollout.samples_per_prompt=4", "rollout.max_new_tokens=10", "eval.max_problems=4", "eval.samples=2",
            "eval.max_new_tokens=10", "grpo.lr=1e-3", "model.threads=1", f"run.backend={backend}"]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    _register()
    yield tmp_path_factory.mktemp("ray")
    if ray.is_initialized():
        ray.shutdown()


@pytest.fixture(scope="module")
def local(root):
    from corl_bench.train.checkpoint import run_fingerprint
    from corl_bench.train.runner import run

    return run_fingerprint(run(load_config(None, _sets(root, "local", "local"))))


def _diff(a: dict, b: dict) -> list:
    from corl_bench.train.checkpoint import fingerprint_diff

    return fingerprint_diff(a, b)


def test_ray_actors_give_the_in_process_results_bit_for_bit(root, local):
    from corl_bench.train.checkpoint import run_fingerprint
    from corl_bench.train.runner import run

    run_dir = run(load_config(None, _sets(root, "ray", "ray")))
    fp = run_fingerprint(run_dir)
    assert set(fp["weights"]) == {"a0", "a1"} and fp["metrics"] and fp["predictions"]
    assert _diff(local, fp) == []


DRIVER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r})
    from corl_bench.config import load_config
    from corl_bench.train.runner import run
    from tests.test_ray_backend_on_cpu import _register, _sets
    from pathlib import Path
    import time
    from corl_bench.train.trainer import Trainer
    step = Trainer.step
    def slow_step(self, i):  # tiny steps take milliseconds: give the test a window to kill in (results unchanged)
        out = step(self, i)
        time.sleep(2.0)
        return out
    Trainer.step = slow_step
    _register()
    run(load_config(None, _sets(Path({tmp!r}), "killed", "ray")), auto_resume=False)
""")


def test_a_ray_run_killed_mid_training_resumes_to_the_same_end(root, local):
    """SIGKILL of the controller's process group once the second checkpoint exists; --resume in this process."""
    from corl_bench.train.checkpoint import run_fingerprint
    from corl_bench.train.runner import run

    run_dir = root / "killed" / "r"
    proc = subprocess.Popen([sys.executable, "-c", DRIVER.format(root=str(ROOT), tmp=str(root))], cwd=ROOT,
                            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 240
    while time.time() < deadline and not (run_dir / "checkpoints" / "step-000002").is_dir():
        if proc.poll() is not None:
            pytest.fail(f"the Ray run ended before it could be killed: {proc.stderr.read().decode()[-2000:]}")
        time.sleep(0.05)
    assert (run_dir / "checkpoints" / "step-000002").is_dir(), "no checkpoint within 240 s"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (run_dir / "checkpoints" / "final").exists()
    resumed = run(load_config(None, _sets(root, "killed", "ray")), resume=run_dir)
    assert _diff(local, run_fingerprint(resumed)) == []


def test_sweep_cells_as_ray_tasks_equal_the_plain_sweep(root):
    from corl_bench.results import RunDir
    from corl_bench.train.checkpoint import fingerprint_diff, run_fingerprint
    from corl_bench.train.sweep import SweepSpec, run_sweep

    common = {k: v for k, v in (s.split("=", 1) for s in _sets(root, "x", "local"))
              if k.startswith(("rollout.", "eval.", "grpo.", "model.", "cohort.agents"))}
    common.update({"run.steps": 2, "run.checkpoint_every": 1})

    def spec(name: str) -> SweepSpec:
        return SweepSpec(name=name, output_dir=str(root / name), methods=("corl", "ttrl"), cohorts=("tiny-pair",),
                         seeds=(0,), set=common)

    plain = run_sweep(spec("plain"))
    on_ray = run_sweep(spec("onray"), ray_address="")
    assert sorted(plain["ran"]) == sorted(on_ray["ran"]) == ["corl-tiny-pair-s0", "ttrl-tiny-pair-s0"]
    assert not on_ray["failed"]
    for run_id in on_ray["ran"]:
        a, b = (root / n / "runs" / run_id for n in ("plain", "onray"))
        assert RunDir(b).info()["status"] == "finished"
        assert fingerprint_diff(run_fingerprint(a), run_fingerprint(b)) == []
    again = run_sweep(spec("onray"), ray_address="")  # finished cells are not rerun
    assert sorted(again["finished"]) == sorted(on_ray["ran"]) and not again["ran"]


def _tensors(obj, where: str = "", seen: set | None = None, depth: int = 0) -> list[str]:
    """Where in ``obj`` a torch tensor or a NumPy array sits (containers, dataclasses and objects' attributes
    searched, each object once)."""
    import dataclasses as dc

    import numpy as np
    import torch

    seen = set() if seen is None else seen
    if id(obj) in seen or depth > 12 or isinstance(obj, (str, bytes, int, float, bool, type(None))):
        return []
    seen.add(id(obj))
    if isinstance(obj, (torch.Tensor, np.ndarray)):
        return [f"{where}: {type(obj).__name__} {tuple(obj.shape)}"]
    if isinstance(obj, dict):
        items = [(f"{where}[{k!r}]", v) for k, v in obj.items()] + [(f"{where}.key", k) for k in obj]
    elif isinstance(obj, (list, tuple, set, frozenset)):
        items = [(f"{where}[{i}]", v) for i, v in enumerate(obj)]
    elif dc.is_dataclass(obj) and not isinstance(obj, type):
        items = [(f"{where}.{f.name}", getattr(obj, f.name)) for f in dc.fields(obj)]
    else:
        items = [(f"{where}.{k}", v) for k, v in getattr(obj, "__dict__", {}).items()]
    return [hit for w, v in items for hit in _tensors(v, w, seen, depth + 1)]


def test_no_tensor_of_model_or_optimiser_state_reaches_the_controller(root, monkeypatch):
    """A Ray run with a checkpoint after every step, then its last checkpoint restored into fresh actors: every
    object the controller gets from an actor (``ray.get``) and every call it sends (``RayAgent.submit``) holds no
    tensor at all; the actors wrote their own checkpoint files, and the restored agents hold the run's final
    weights."""
    import torch
    from safetensors.torch import load_file

    from corl_bench.results import RunDir
    from corl_bench.train import actors
    from corl_bench.train.boundary import AgentGroup
    from corl_bench.train.checkpoint import latest_checkpoint, load_checkpoint
    from corl_bench.train.runner import resolve, run

    assert _tensors({"optimizer": [{"state": {0: {"exp_avg": torch.zeros(2)}}}]}) != []  # the search finds them
    received, sent = [], []
    real_get, real_submit = ray.get, actors.RayAgent.submit

    def get(*args, **kwargs):
        out = real_get(*args, **kwargs)
        received.append(out)
        return out

    def submit(self, method, *args, **kwargs):
        sent.append((method, args, kwargs))
        return real_submit(self, method, *args, **kwargs)

    monkeypatch.setattr(ray, "get", get)
    monkeypatch.setattr(actors.RayAgent, "submit", submit)
    cfg = load_config(None, _sets(root, "watched", "ray") + ["run.steps=2"])
    run_dir = run(cfg)
    checkpoint = latest_checkpoint(run_dir)
    assert checkpoint is not None and checkpoint.name == "step-000002"
    assert {p.name for p in checkpoint.glob("agent-*.pt")} == {"agent-a0.pt", "agent-a1.pt"}
    assert {"generate", "score", "update", "checkpoint", "save"} <= {m for m, _, _ in sent}

    plan = resolve(cfg)
    agents = actors.start_agents(plan.config, plan.method_cls.auxiliary)
    try:
        load_checkpoint(checkpoint, agents)
        AgentGroup(agents).save({a.name: root / "restored" / a.name for a in agents})
    finally:
        actors.stop_agents(agents)
    assert "restore" in {m for m, _, _ in sent} and len(received) > 10
    assert _tensors(received, "received") == []
    assert _tensors(sent, "sent") == []
    for name in ("a0", "a1"):
        final = load_file(RunDir(run_dir).final_checkpoint(name) / "model.safetensors")
        restored = load_file(root / "restored" / name / "model.safetensors")
        assert final.keys() == restored.keys() and all(torch.equal(final[k], restored[k]) for k in final)
