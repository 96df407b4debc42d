"""The real-model study's pieces (issue 25) on tiny folder models: the generated arithmetic (a training part and a
held-out part that never meet, a transfer form), the hf profile serving them as benchmarks, and in-run evaluation
that asks each agent as it is trained (``ask_as_trained``: a chat model bare in its template, a base model few-shot,
stopping at the next question)."""

from __future__ import annotations

from pathlib import Path

import pytest

from corl_bench.config import ConfigError, load_config
from tests.conftest import build_tiny

TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def _value(text: str) -> int:
    expr = text.removeprefix("What is ").removesuffix("?").replace(" x ", " * ")
    return int(eval(expr, {"__builtins__": {}}))  # noqa: S307 - digits and + - * only, built by the test's subject


def test_the_arith_split_is_disjoint_stable_and_answers_are_right():
    from corl_bench.hf import arith
    from corl_bench.hf.data import TrainingSet

    universe = arith.small_universe()
    assert len(universe) == len({p for p, _ in universe}) == 400 + 210 + 144
    train = {r["problem"] for r in arith.train_rows()}
    held = {p for _, p, _ in arith.heldout_rows()}
    assert not train & held and train | held == {p for p, _ in universe}
    assert (len(train), len(held)) == (353, 401)  # the hash split is fixed: these counts are the study's
    assert all(_value(p) == int(a) for p, a in universe)
    transfer = arith.transfer_rows(400, 0)
    assert len({p for _, p, _ in transfer}) == 400 and not {p for _, p, _ in transfer} & (train | held)
    assert all(_value(p) == int(a) >= 0 for _, p, a in transfer)
    assert transfer == arith.transfer_rows(400, 0) and transfer != arith.transfer_rows(400, 1)
    rows = TrainingSet.load("arith-small", None)
    assert {p.text("original") for p in rows.problems} == train


def test_the_qwen_settings_mul_split_is_disjoint_stable_and_served_as_suites_and_a_training_set():
    """arith-mul (issue 40): three disjoint parts of a fixed size, right answers, the held-out and dev parts served
    as the hf profile's generated suites and the training part as data.train=arith-mul."""
    from corl_bench.eval.specs import get_spec
    from corl_bench.hf import arith
    from corl_bench.hf.data import TrainingSet
    from corl_bench.hf.profile import HFProfile

    universe = arith.mul_universe()
    assert len(universe) == len({p for p, _ in universe}) == 88 * 9
    assert all(_value(p) == int(a) for p, a in universe)
    parts = {name: {p for _, p, _ in arith.mul_rows(name)} for name in ("heldout", "dev", "train")}
    assert {k: len(v) for k, v in parts.items()} == {"heldout": 388, "dev": 79, "train": 325}  # fixed by the hash
    assert set.union(*parts.values()) == {p for p, _ in universe}
    assert not (parts["heldout"] & parts["dev"] or parts["heldout"] & parts["train"] or parts["dev"] & parts["train"])
    profile = HFProfile()
    for name, part in (("arith-mul-heldout", "heldout"), ("arith-mul-dev", "dev")):
        HFProfile.check_benchmark(name, get_spec(name))
        items = profile.benchmark(name)
        assert {it.problem for it in items} == parts[part] and all(it.gold == str(_value(it.problem)) for it in items)
    rows = TrainingSet.load("arith-mul", None)
    assert {p.text("original") for p in rows.problems} == parts["train"]
    with pytest.raises(ValueError, match="parts heldout, dev and train"):
        arith.mul_rows("test")


def test_the_hf_profile_serves_its_generated_suites_and_refuses_others():
    from corl_bench.eval.specs import get_spec, parse_spec
    from corl_bench.hf.profile import HFProfile

    profile = HFProfile()
    items = profile.benchmark("arith-heldout")
    assert len(items) == 401 and items[0].gold == str(_value(items[0].problem))
    assert len(profile.benchmark("arith-transfer")) == 200
    for name in ("arith-heldout", "arith-transfer"):
        HFProfile.check_benchmark(name, get_spec(name))
    with pytest.raises(ConfigError, match="micro-profile suite"):
        HFProfile.check_benchmark("micro-test", get_spec("micro-test"))
    with pytest.raises(ConfigError, match="ask_as_trained: only a profile's generated suite") as e:
        parse_spec({"name": "x", "version": "1", "task": "math", "source": {"local": "x.jsonl"},
                    "prompt": "{problem}", "extractor": "qwen", "grader": "math", "ask_as_trained": True})
    assert "\n" not in str(e.value)


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> tuple[Path, Path]:
    """A tiny chat model (with a template) and a tiny base model (none), saved as folders."""
    root = tmp_path_factory.mktemp("tiny")
    out = []
    for name, family, template in (("chat", "qwen2-bpe", TEMPLATE), ("base", "llama-bpe", None)):
        model, tok = build_tiny(family, seed=len(out))
        if template:
            tok.chat_template = template
        model.save_pretrained(root / name)
        tok.save_pretrained(root / name)
        out.append(root / name)
    return out[0], out[1]


def test_a_run_asks_each_agent_the_held_out_suite_as_it_is_trained(folders, tmp_path, monkeypatch):
    """Co-RL, one step, a bare chat agent and a few-shot base agent on data.train=arith-small, evaluated on both
    generated suites: each agent's prediction rows hold its own training format (the base agent's stop string
    applied), nothing was dropped as contaminated, and the bare agent's rows equal `corl-bench eval`'s (whose spec
    template is the bare problem in the chat template)."""
    from corl_bench.eval.evaluator import eval_seed
    from corl_bench.eval.targets import run_eval
    from corl_bench.hf.data import INSTRUCTION
    from corl_bench.results import RunDir, read_jsonl
    from corl_bench.train.runner import run

    chat, base = folders
    monkeypatch.setenv("CORL_BENCH_CACHE", str(tmp_path / "cache"))
    cfg = load_config(None, [
        "method.name=corl", "cohort.name=tiny-native", "cohort.profile=hf",
        f"cohort.agents=[{{name: a0, family: '{chat}', prompt: bare}}, "
        f"{{name: a1, family: '{base}', seed_offset: 1, prompt: fewshot}}]",
        "run.steps=1", "rollout.prompts_per_step=2", "rollout.samples_per_prompt=2", "rollout.max_new_tokens=6",
        "rollout.backend=fast", "eval.benchmarks=[arith-heldout,arith-transfer]", "eval.max_problems=3",
        "eval.samples=2", "eval.greedy=true", "eval.temperature=1.0", "eval.max_new_tokens=12", "data.train=arith-small",
        f"run.output_dir={tmp_path / 'runs'}", "run.log_samples_every=1", "run.checkpoint_every=0"])
    rd = RunDir(run(cfg, auto_resume=False))
    info = rd.info()
    assert info["status"] == "finished" and info["contamination"]["dropped"] == 0
    assert info["contamination"]["problems_before"] == 353
    for phase in ("base", "final"):
        for bench in ("arith-heldout", "arith-transfer"):
            bare = read_jsonl(rd.predictions_path(phase, "a0", bench))
            few = read_jsonl(rd.predictions_path(phase, "a1", bench))
            assert len(bare) == len(few) == 3 * 3
            assert all(r["prompt"].startswith("<|user|>What is ") and INSTRUCTION not in r["prompt"] for r in bare)
            assert all(r["prompt"].startswith("Question: What is 3 + 4?") and r["prompt"].endswith("Answer:")
                       and "\nQuestion:" not in r["completion"] for r in few)
    offline = tmp_path / "offline"
    run_eval(str(chat), ["arith-heldout"], out=offline, seed=eval_seed(0, 0), max_problems=3,
             overrides={"samples": 2, "max_new_tokens": 12, "temperature": 1.0}, chunk=1000)
    keys = ("problem_id", "decoding", "sample_index", "prompt", "completion", "extracted", "correct")
    mine = read_jsonl(rd.predictions_path("base", "a0", "arith-heldout"))
    theirs = read_jsonl(next(offline.rglob("arith-heldout.jsonl")))
    assert [[r[k] for k in keys] for r in mine] == [[r[k] for k in keys] for r in theirs]


def test_the_fast_engine_prefills_a_common_prompt_head_once_and_samples_the_same(folders):
    """``prefix_cache=True``: a batch whose prompts share a long head (a chat template's system turn, a few-shot
    prompt), with rows of different lengths, gives the same tokens and log-probs (float tolerance) as the plain
    prefill, and the head is prefilled once."""
    import torch

    from corl_bench.hf.profile import fewshot_prompt, ARITH_SHOTS
    from corl_bench.models.load import load_folder
    from corl_bench.rollout import SamplingParams
    from corl_bench.rollout import fast

    model, tok = load_folder(folders[1], device="cpu", dtype="float32")
    prompts = [fewshot_prompt(q, ARITH_SHOTS) for q in ("What is 1 + 2?", "What is 13 - 7?", "What is 12 x 11?")]
    enc = fast.FastEngine(model, tok).encode(prompts, "cpu")
    assert fast._common_prefix(enc) >= fast._MIN_SHARED and len(set(enc["attention_mask"].sum(-1).tolist())) > 1
    params = SamplingParams(n=2, temperature=1.0, max_new_tokens=6, seed=5)
    plain = fast.FastEngine(model, tok).generate(prompts, params)
    shared = fast.FastEngine(model, tok, prefix_cache=True).generate(prompts, params)
    for xs, ys in zip(plain, shared):
        for x, y in zip(xs, ys):
            assert x.token_ids == y.token_ids
            assert torch.allclose(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-4)


@pytest.mark.slow
def test_the_study_script_runs_its_sweep_and_writes_every_figure(folders, tmp_path, monkeypatch):
    """scripts/real_study.py on the study's own sweep settings (sweeps/real-study.yaml), its Base and Co-RL cells
    only, two seeds, tiny models in place of SmolLM2 and Gemma: the sweep runs, keeps its cells, and every file the
    write-up quotes is written from them (claims paired by seed, the suites' sampling error, curves, collapse)."""
    import importlib.util
    import sys

    import yaml

    from corl_bench.results import read_jsonl

    repo = Path(__file__).resolve().parents[1]
    chat, base = folders
    sweep = yaml.safe_load((repo / "sweeps" / "real-study.yaml").read_text())
    claims = yaml.safe_load((repo / "results" / "real-study" / "claims.yaml").read_text())
    sweep.update(output_dir=str(tmp_path / "sweep"), keep=str(tmp_path / "kept"), seeds=[0, 1],
                 cells=[c for c in sweep["cells"] if c.get("tag") == "base" or c["method"] == "corl"
                        and c["cohort"] == "smol-cross-family-arith"])
    sweep["set"].update({
        "cohort.agents": [{"name": "a0", "family": str(chat), "prompt": "bare"},
                          {"name": "a1", "family": str(base), "seed_offset": 1, "prompt": "fewshot-arith"}],
        "cohort.profile": "hf", "run.steps": 1, "rollout.prompts_per_step": 2, "rollout.samples_per_prompt": 2,
        "rollout.max_new_tokens": 6, "eval.max_problems": 4, "eval.max_new_tokens": 8})
    for claim in claims["claims"]:
        claim["backbones"] = [str(chat) if b == "smol" else str(base) for b in claim["backbones"]]
    (tmp_path / "real-study.yaml").write_text(yaml.safe_dump(sweep))
    (tmp_path / "claims.yaml").write_text(yaml.safe_dump(claims))
    monkeypatch.setenv("CORL_BENCH_CACHE", str(tmp_path / "cache"))
    spec = importlib.util.spec_from_file_location("real_study", repo / "scripts" / "real_study.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    out = tmp_path / "out"
    monkeypatch.setattr(sys, "argv", ["real_study.py", "--sweep", str(tmp_path / "real-study.yaml"),
                                      "--out", str(out), "--claims", str(tmp_path / "claims.yaml")])
    assert script.main() == 0
    kept = sorted(p.name for p in (tmp_path / "kept" / "runs").iterdir())
    assert kept == ["corl-smol-cross-family-arith-s0", "corl-smol-cross-family-arith-s1",
                    "gt-reward-smol-cross-family-arith-base-s0", "gt-reward-smol-cross-family-arith-base-s1"]
    tables = (out / "tables.md").read_text()
    assert "**arith-transfer · " in tables and "| corl × smol-cross-family-arith | 2 |" in tables
    claims_md = (out / "claims.md").read_text()
    assert "### arith-heldout" in claims_md and "| Co-RL above Base | " in claims_md and "s0: " in claims_md
    intervals = (out / "intervals.md").read_text()
    assert "| arith-heldout | 4 | a0 |" in intervals and "| arith-transfer | 4 | a1 |" in intervals
    base = read_jsonl(next((tmp_path / "kept").rglob("*base-s0/eval/final/a0/arith-heldout.jsonl")))
    greedy = [r["correct"] for r in base if r["decoding"] == "greedy"]
    assert f"| arith-heldout | 4 | a0 | {100 * sum(greedy) / 4:.1f} |" in intervals  # the base accuracy, regraded
    dynamics = (out / "dynamics.md").read_text()
    assert "| corl × smol-cross-family-arith | a1 |" in dynamics and "base" not in dynamics.split("\n", 3)[-1]
    assert "corl-smol-cross-family-arith-s0: silent" in (out / "collapse.md").read_text()
    assert "| Co-RL above Base |" in (out / "micro-vs-real.md").read_text()
    assert "| **all** | 4 |" in (out / "walltime.md").read_text()
    assert (out / "corl-smol-cross-family-arith-s0.png").stat().st_size > 0
