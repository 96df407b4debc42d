"""The micro families' shipped checkpoints (issue 28): every built-in family ships the checkpoint of its current
recipe, a run reads it and builds nothing, a tampered one is refused in one line, a changed recipe is built in the
cache instead, and a rebuild check compares the weights' hash, the stop step and the dev accuracy (run here on a
tiny family that warm-starts in seconds; ``corl-bench warmstart --verify`` does it for the real ones)."""

from __future__ import annotations

import dataclasses
import logging
import shutil

import pytest

from corl_bench.config import ConfigError, ModelConfig
from corl_bench.micro import rebuild, shipped
from corl_bench.micro.families import BUILTIN_FAMILIES
from corl_bench.micro.vl_families import VISUAL_FAMILIES
from corl_bench.registries import FAMILIES
from tests.conftest import tiny_family

BUILTIN = sorted({**BUILTIN_FAMILIES, **VISUAL_FAMILIES})


@pytest.mark.parametrize("family", BUILTIN)
def test_every_builtin_family_ships_the_checkpoint_of_its_current_recipe_on_cpu(family) -> None:
    man = shipped.manifest(family)
    assert man is not None, f"no shipped checkpoint of {family}: corl-bench warmstart --write {family}"
    prof = rebuild.profile_for(family)
    assert man["fingerprint"] == prof.fingerprint(prof.family(family)), (
        f"{family}'s recipe changed since its checkpoint was shipped: rebuild and commit it "
        f"(corl-bench warmstart --write {family})")
    folder = shipped.ROOT / family
    assert shipped.verify_files(folder, man["files"]) == []
    assert {"model.safetensors", "config.json", "tokenizer.json", "warmstart.json"} <= set(man["files"])
    assert sum((folder / f).stat().st_size for f in man["files"]) < 8 * 2**20  # a few MB each
    assert man["steps"] == __import__("json").loads((folder / "warmstart.json").read_text())["steps"]


def test_a_run_reads_the_shipped_checkpoint_and_builds_nothing_on_cpu(tmp_path) -> None:
    from corl_bench.micro.profile import MicroProfile

    prof = MicroProfile(ModelConfig(cache_dir=str(tmp_path / "cache")))
    assert prof.checkpoint_dir("qwen2-bpe") == shipped.ROOT / "qwen2-bpe"
    assert prof.missing(["qwen2-bpe", "llama-bpe"]) == []
    model, tok = prof.load("qwen2-bpe", device="cpu")
    assert model.config.model_type == "qwen2" and tok.padding_side == "left"
    assert not (tmp_path / "cache").exists()  # nothing was warm-started or cached
    build = MicroProfile(ModelConfig(cache_dir=str(tmp_path / "cache"), micro_checkpoints="build"))
    assert build.checkpoint_dir("qwen2-bpe").parent.parent == tmp_path / "cache"
    assert build.missing(["qwen2-bpe"]) == ["qwen2-bpe"]


def test_a_tampered_shipped_checkpoint_is_refused_in_one_line_on_cpu(tmp_path) -> None:
    shutil.copytree(shipped.ROOT / "llama-bpe", tmp_path / "llama-bpe")
    man = shipped.manifest("llama-bpe")
    with (tmp_path / "llama-bpe" / "model.safetensors").open("r+b") as f:
        f.seek(-4, 2)
        f.write(b"\x00\x01\x02\x03")
    with pytest.raises(ConfigError) as e:
        shipped.find("llama-bpe", man["fingerprint"], root=tmp_path)
    assert "\n" not in str(e.value) and "model.safetensors" in str(e.value)
    assert "model.micro_checkpoints=build" in str(e.value)


def test_a_changed_recipe_is_built_in_the_cache_with_a_warning_on_cpu(tmp_path, caplog) -> None:
    shutil.copytree(shipped.ROOT / "neox-bpe", tmp_path / "neox-bpe")
    with caplog.at_level(logging.WARNING, logger="corl_bench"):
        assert shipped.find("neox-bpe", "0000000000", root=tmp_path) is None
    assert "corl-bench warmstart --write neox-bpe" in caplog.text


def test_micro_checkpoints_takes_shipped_or_build_on_cpu() -> None:
    with pytest.raises(ConfigError, match="model.micro_checkpoints must be shipped or build"):
        ModelConfig(micro_checkpoints="download")


def test_write_then_verify_a_rebuild_on_a_tiny_family_on_cpu(tmp_path) -> None:
    """The real rebuild check end to end on a tiny family: ship one build, rebuild from scratch, compare."""
    fam = dataclasses.replace(tiny_family("qwen2-bpe", warmstart_steps=6, warmstart_batch=8, warmstart_min_steps=3,
                                          warmstart_check_every=3), name="tiny-ship-qwen2-bpe")
    if fam.name not in FAMILIES:
        FAMILIES.register(fam.name, fam)
    root = tmp_path / "shipped"
    written = rebuild.ship([fam.name], cache_dir=tmp_path / "cache-a", root=root)[fam.name]
    man = shipped.manifest(fam.name, root)
    assert man["profile"] == "micro" and man["built_with"]["threads"] == 1
    assert shipped.find(fam.name, rebuild.profile_for(fam.name).fingerprint(fam), root=root) == written
    result = rebuild.verify([fam.name], tmp_path / "cache-b", root=root)[fam.name]
    assert result["same_weights"] and result["same_steps"] and result["steps"][0] == man["steps"]
    # a build from another recipe (another seed) is reported as different, not hidden
    other = dataclasses.replace(fam, name="tiny-ship-qwen2-bpe-other", seed=5)
    if other.name not in FAMILIES:
        FAMILIES.register(other.name, other)
    built = rebuild.rebuild([other.name], tmp_path / "cache-a")[other.name]
    assert not shipped.compare(built, written)["same_weights"]


def test_warmstart_command_lists_and_refuses_bad_input_in_one_line_on_cpu() -> None:
    from typer.testing import CliRunner

    from corl_bench.cli import app

    res = CliRunner().invoke(app, ["warmstart"])
    assert res.exit_code == 0, res.output
    for family in BUILTIN:
        assert f"{family}: shipped, " in res.stdout and "STALE" not in res.stdout
    bad = CliRunner().invoke(app, ["warmstart", "no-such-family", "--verify"])
    assert bad.exit_code == 2 and len(bad.output.strip().splitlines()) == 1 and "no-such-family" in bad.output
    both = CliRunner().invoke(app, ["warmstart", "--verify", "--write"])
    assert both.exit_code == 2 and "not both" in both.output
