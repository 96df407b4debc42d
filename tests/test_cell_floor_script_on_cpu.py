"""scripts/cell_floor.py: the work it counts from a run directory, worked by hand on a made-up two-step run (one
agent, a 2-layer model of 20 body and 15 head weights, words as tokens), and the floors and verdicts it derives."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARCH = SimpleNamespace(layers=2, layer_params=10, vocab=5, hidden=3, intermediate=4)  # body 20, head 15


def _script():
    spec = importlib.util.spec_from_file_location("cell_floor", ROOT / "scripts" / "cell_floor.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _lines(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture
def run(tmp_path: Path) -> Path:
    """2 prompts x 2 samples a step, two steps of mean length 3 and 2; prompts logged at 3 and 4 words; two
    evaluation problems sharing a 2-word head, each decoded greedily (3 tokens) and sampled (2 tokens)."""
    (tmp_path / "run.json").write_text(json.dumps({"agents": [{"name": "a0", "family": "toy"}],
                                                   "timings": {"train": 10.0, "eval_final": 4.0}}))
    (tmp_path / "config.yaml").write_text("rollout:\n  prompts_per_step: 2\n  samples_per_prompt: 2\n")
    _lines(tmp_path / "metrics.jsonl", [{"step": 0, "agent": "a0", "len/mean": 3.0, "loss": 0.1},
                                        {"step": 1, "agent": "a0", "len/mean": 2.0, "loss": 0.2}])
    _lines(tmp_path / "samples.jsonl", [{"agent": "a0", "prompt": "a b c"}, {"agent": "a0", "prompt": "a b c d"}])
    preds = [{"problem_id": pid, "prompt": prompt, "decoding": dec, "n_tokens": n}
             for pid, prompt in (("p1", "x y z q"), ("p2", "x y w")) for dec, n in (("greedy", 3), ("sampled", 2))]
    _lines(tmp_path / "eval" / "final" / "a0" / "bench.jsonl", preds)
    return tmp_path


def test_the_work_is_counted_as_worked_by_hand(run):
    cf = _script()
    w = cf.count_work(run, lambda family: ARCH, lambda family, text: text.split())["a0"]
    assert (w["steps"], w["train_prompt_tokens"], w["completion_tokens"], w["eval_tokens"]) == (2, 3, 20, 10)
    # rollouts: 2 steps x 2 prompts x 3 prompt tokens + (20 - 8) further tokens through the body (24), one head per
    # prompt and per further token (4 + 12 = 16): 2 x (24 x 20 + 16 x 15)
    assert w["flops"]["rollout"] == 2 * (24 * 20 + 16 * 15)
    # training: forward + backward (3x) over the same body tokens, the head at every completion token (20)
    assert w["flops"]["train"] == 2 * (3 * 24 * 20 + 3 * 20 * 15)
    # evaluation: the shared head (2) once, each problem's own tokens (2 + 1) once, (3-1 + 2-1) x 2 further tokens;
    # one head per problem's prefill (2) and per further token (6)
    assert w["flops"]["eval"] == 2 * (11 * 20 + 8 * 15)


def test_an_agent_without_a_loss_is_not_counted_as_training(run):
    cf = _script()
    _lines(run / "metrics.jsonl", [{"step": 0, "agent": "a0", "len/mean": 3.0}])
    w = cf.count_work(run, lambda family: ARCH, lambda family, text: text.split())["a0"]
    assert not w["trains"] and w["flops"]["train"] == 0 and w["flops"]["rollout"] > 0


def test_floors_and_verdicts_divide_by_the_rates(run):
    cf = _script()
    work = cf.count_work(run, lambda family: ARCH, lambda family, text: text.split())
    rates = {"toy": {"body": 1.0, "head": 2.0}}  # GFLOP/s
    fl = cf.floors(work, rates)
    assert fl["rollout"]["floor_s"] == pytest.approx((2 * 24 * 20) / 1e9 + (2 * 16 * 15) / 2e9)
    assert fl["rollout"]["floor_best_s"] == pytest.approx(2 * (24 * 20 + 16 * 15) / 2e9)
    v = cf.verdict(fl, {"train": 1e-5, "eval": 2e-6})
    train_floor = fl["rollout"]["floor_s"] + fl["train"]["floor_s"]
    assert v["train"]["share_of_peak"] == pytest.approx(train_floor / 1e-5)
    assert v["train"]["halving_needs"] == pytest.approx(2 * train_floor / 1e-5)
    assert v["cell"]["floor_s"] == pytest.approx(train_floor + fl["eval"]["floor_s"])
    assert v["cell"]["halving_needs"] == pytest.approx(2 * v["cell"]["floor_s"] / 1.2e-5)


def test_a_missing_prompt_log_and_a_wrong_directory_are_refused_in_one_line(run, tmp_path):
    cf = _script()
    (run / "samples.jsonl").unlink()
    with pytest.raises(SystemExit, match="samples.jsonl"):
        cf.count_work(run, lambda family: ARCH, lambda family, text: text.split())
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "cell_floor.py"), str(tmp_path / "nowhere")],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode != 0 and proc.stderr.strip().splitlines()[-1].endswith("give a finished run's directory")
