"""Every method trains real vision-language architectures (issue 24, item 3): one step of each method on tiny random
checkpoints of Qwen2.5-VL and InternVL (and Gemma-3 as a third agent), loaded from ``save_pretrained`` folders through
their own processors, on a multimodal training JSONL, through corl-bench's runner (profile ``hf``) and evaluated on a
MathVision fixture; each agent is rewarded, updated and scored with the image in its prompt."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corl_bench.config import load_config
from corl_bench.models.tiny_vlm import build

ARCHS = {"qv": "qwen2.5-vl", "iv": "internvl", "g3": "gemma3"}
CASES = [("corl", 2, []), ("corl", 3, []), ("corl", 3, ["method.options={supervision: peer-majority}"]),
         ("ttrl", 1, []), ("gt-reward", 1, []), ("rent", 1, []), ("intuitor", 1, []), ("co-rewarding-ii", 1, []),
         ("mm-upt", 2, []), ("comas", 2, []), ("corl-frozen-peer", 2, [])]


def _png(path: Path, shade: int) -> None:
    from PIL import Image, ImageDraw

    path.parent.mkdir(parents=True, exist_ok=True)
    im = Image.new("RGB", (28 + 4 * shade, 24), (255, 255, 255))
    ImageDraw.Draw(im).rectangle((2, 2, 10 + shade, 12), fill=(shade * 40 % 255, 0, 0))
    im.save(path)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The tiny VLM folders, a multimodal training JSONL and a MathVision fixture."""
    root = tmp_path_factory.mktemp("real-vlm-world")
    models = {k: build(a, root / "models" / a, seed=i) for i, (k, a) in enumerate(ARCHS.items())}
    rows = [{"id": f"t{i}", "problem": f"How many red boxes are there? ({i})", "answer": str(1 + i % 3),
             "image": f"images/t{i}.png"} for i in range(6)]
    for i in range(6):
        _png(root / "train" / "images" / f"t{i}.png", i)
    (root / "train" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    bench = root / "data" / "mathvision"
    test = [{"id": f"mathvision_{i}", "problem": f"How many digits?\n<image1> ({i})", "answer": str(i),
             "image": f"images/{i}.png", "choices": None, "question_type": "free_form"} for i in range(2)]
    for i in range(2):
        _png(bench / "images" / f"{i}.png", i + 2)
    (bench / "testmini.jsonl").write_text("".join(json.dumps(r) + "\n" for r in test))
    return models, root


def _agents(models: dict[str, Path], n: int) -> str:
    keys = list(ARCHS)[:n] if n > 1 else ["qv"]
    return "[" + ", ".join(f"{{name: a{i}-{k}, family: '{models[k]}', seed_offset: {i}}}"
                           for i, k in enumerate(keys)) + "]"


@pytest.mark.parametrize("method,n,extra", CASES, ids=[f"{m}-{n}{'-pm' if e else ''}" for m, n, e in CASES])
def test_each_method_trains_real_vlm_architectures_on_cpu(world, tmp_path, method, n, extra):
    from corl_bench.registries import METHODS
    from corl_bench.results import RunDir, read_jsonl
    from corl_bench.train.runner import run

    models, root = world
    n = max(n, METHODS.get(method).min_agents)
    cfg = load_config(None, [
        f"method.name={method}", f"cohort.name=tiny-vlm-{n}", "cohort.profile=hf", f"cohort.agents={_agents(models, n)}",
        "run.steps=1", "rollout.prompts_per_step=2", "rollout.samples_per_prompt=2", "rollout.max_new_tokens=6",
        "eval.benchmarks=[mathvision_testmini]", "eval.max_problems=2", "eval.samples=0", "eval.greedy=true",
        "eval.max_new_tokens=6", "eval.before=false", f"data.data_dir={root / 'data'}",
        f"data.train={root / 'train' / 'train.jsonl'}", "run.save_checkpoints=false", "run.checkpoint_every=0",
        f"run.output_dir={tmp_path}", "memory.micro_batch=2", "model.threads=1", *extra])
    rd = RunDir(run(cfg, auto_resume=False))
    info = rd.info()
    assert info["status"] == "finished" and info["profile"] == "hf"
    rows = [r for r in read_jsonl(rd.metrics_path) if "reward/mean" in r]
    assert sorted(r["agent"] for r in rows) == sorted(a.name for a in cfg.cohort.agents)
    for a in info["agents"]:
        preds = read_jsonl(rd.predictions_path("final", a["name"], "mathvision_testmini"))
        assert len(preds) == 2 and all(p["images"] for p in preds)


def test_memory_fitting_gives_a_vision_language_cohort_its_micro_batch_and_logit_chunk_on_cpu(world, tmp_path,
                                                                                            monkeypatch):
    """The hf profile fits a micro-batch and a logit chunk where the config sets neither; chunked logits take images,
    so a VLM cohort (a real VLM's 150k vocabulary gets a chunk) resolves with both."""
    from corl_bench.hf import fit
    from corl_bench.train.runner import resolve

    models, root = world
    monkeypatch.setattr(fit, "fit_memory", lambda *a, **k: (4, 256, {}))  # what a 150k-token vocabulary gets
    cfg = load_config(None, [
        "method.name=corl", "cohort.name=tiny-vlm-2", "cohort.profile=hf", f"cohort.agents={_agents(models, 2)}",
        "eval.benchmarks=[mathvision_testmini]", f"data.data_dir={root / 'data'}",
        f"data.train={root / 'train' / 'train.jsonl'}", f"run.output_dir={tmp_path}"])
    mem = resolve(cfg).config.memory
    assert (mem.micro_batch, mem.logit_chunk) == (4, 256)
