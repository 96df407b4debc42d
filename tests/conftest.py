"""Shared fixtures: tiny *untrained* models of the micro families (seconds to build, no warm start)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def load_script(name: str):
    """``scripts/<name>.py`` as a module (``scripts/`` is not a package), loaded from its file."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[1] / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def tiny_family(name: str, **overrides):
    from corl_bench.micro.families import BUILTIN_FAMILIES

    fam = BUILTIN_FAMILIES[name]
    small = {"hidden_size": 32, "n_embd": 32, "intermediate_size": 64, "n_inner": 64, "num_hidden_layers": 1,
             "n_layer": 1, "num_attention_heads": 2, "n_head": 2, "num_key_value_heads": 1}
    kwargs = tuple((k, small.get(k, v)) for k, v in fam.model_kwargs)
    return dataclasses.replace(fam, name=f"tiny-{name}", model_kwargs=kwargs, **overrides)


def build_tiny(name: str, seed: int = 0):
    """(model, tokenizer) of a tiny random-init model with the family's real tokenizer kind."""
    import itertools

    import torch

    from corl_bench.micro.families import build_model, build_tokenizer
    from corl_bench.micro.tasks import problem_stream
    from corl_bench.micro.warmstart import render_prompt

    fam = tiny_family(name)
    corpus = [render_prompt(p.text(v)) + p.solution() for p in itertools.islice(problem_stream(0), 300)
              for v in ("original", "rephrased")]
    tok = build_tokenizer(fam.tokenizer, corpus)
    torch.manual_seed(seed)
    model = build_model(fam, tok).eval()
    return model, tok


@pytest.fixture(scope="session")
def tiny_qwen():
    return build_tiny("qwen2-bpe")


@pytest.fixture(scope="session")
def tiny_folder(tmp_path_factory):
    """A tiny random qwen2-architecture model saved with ``save_pretrained``, no chat template: an hf-profile agent
    without downloads (a module may define its own ``tiny_folder``, as test_hf_profile_on_cpu.py does)."""
    folder = tmp_path_factory.mktemp("tiny") / "tiny"
    model, tok = build_tiny("qwen2-bpe")
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture
def hub_answers(monkeypatch):
    """The Hugging Face hub counts as reachable and as holding every dataset: for tests that replace its loaders
    (``datasets.load_dataset``, the LiveCodeBench download) with stand-ins and check what is done with the rows."""
    import corl_bench.hub_access as hub_access

    monkeypatch.setattr(hub_access, "unreachable_reason", lambda: "")
    monkeypatch.setattr(hub_access, "_exists_on_hub", lambda repo: True)
