"""corl-bench sweep: the grid is planned and validated first, invalid pairs are listed, finished cells are
skipped and an interrupted cell is resumed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corl_bench.config import ConfigError
from corl_bench.registries import FAMILIES
from corl_bench.train.sweep import Cell, load_sweep, plan, run_sweep
from tests.conftest import tiny_family

pytestmark = pytest.mark.slow


def write_sweep(tmp_path: Path, **over) -> Path:
    for name in ("qwen2-bpe", "neox-bpe"):
        fam = tiny_family(name, warmstart_steps=4, warmstart_batch=16)
        if fam.name not in FAMILIES:
            FAMILIES.register(fam.name, fam)
    from corl_bench.registries import COHORTS, cohort_from_yaml

    for name, agents in (("tiny-one", "[{name: a0, family: tiny-qwen2-bpe}]"),
                         ("tiny-two", "[{name: a0, family: tiny-qwen2-bpe}, "
                                      "{name: a1, family: tiny-neox-bpe, seed_offset: 1}]")):
        if name not in COHORTS:
            COHORTS.register(name, cohort_from_yaml(name, f"name: {name}\nprofile: micro\nagents: {agents}\n"))
    spec = {"name": "t", "output_dir": str(tmp_path / "sweep"), "methods": ["ttrl", "corl"],
            "cohorts": ["tiny-one", "tiny-two"], "seeds": [0],
            "set": {"run.steps": 2, "model.cache_dir": str(tmp_path / "cache"), "rollout.prompts_per_step": 2,
                    "rollout.samples_per_prompt": 2, "rollout.max_new_tokens": 8, "eval.max_problems": 2,
                    "eval.samples": 1, "eval.max_new_tokens": 8, "run.checkpoint_every": 1}, **over}
    path = tmp_path / "sweep.yaml"
    path.write_text(json.dumps(spec))
    return path


def test_plan_lists_invalid_pairs_and_validates_every_cell(tmp_path):
    spec = load_sweep(write_sweep(tmp_path))
    cells, skipped = plan(spec)
    assert cells == [Cell("ttrl", "tiny-one", 0), Cell("ttrl", "tiny-two", 0), Cell("corl", "tiny-two", 0)]
    assert len(skipped) == 1 and skipped[0].startswith("corl x tiny-one: method 'corl' needs at least 2 agents")
    with pytest.raises(ConfigError, match="sweep cell ttrl-tiny-one-s0: .*grpo.lr"):
        plan(load_sweep(write_sweep(tmp_path, set={"grpo.lr": -1})))
    bad = tmp_path / "bad.yaml"
    bad.write_text("methods: [corl]\nseeds: one\n")
    with pytest.raises(ConfigError, match="seeds must be a list of integers"):
        load_sweep(bad)


def test_sweep_runs_the_grid_skips_finished_and_resumes_interrupted(tmp_path, monkeypatch):
    from corl_bench.train.trainer import Trainer

    spec = load_sweep(write_sweep(tmp_path))
    original = Trainer.step

    def crash_in_corl(self, step):
        if self.method.name == "corl" and step == 1:
            raise RuntimeError("simulated crash")
        return original(self, step)

    monkeypatch.setattr(Trainer, "step", crash_in_corl)
    first = run_sweep(spec)
    assert first["ran"] == ["ttrl-tiny-one-s0", "ttrl-tiny-two-s0"] and first["failed"] == ["corl-tiny-two-s0"]
    monkeypatch.setattr(Trainer, "step", original)
    second = run_sweep(spec)
    assert second["finished"] == ["ttrl-tiny-one-s0", "ttrl-tiny-two-s0"] and second["resumed"] == ["corl-tiny-two-s0"]
    info = json.loads((Path(spec.output_dir) / "runs" / "corl-tiny-two-s0" / "run.json").read_text())
    assert info["status"] == "finished" and len(info["resumed_at"]) == 1


def test_tagged_cell_is_a_variant_with_its_own_overrides_and_run_id(tmp_path):
    cells = [{"method": "ttrl", "cohort": "tiny-one", "tag": "budget-matched",
              "set": {"rollout.prompts_per_step": 4, "eval.every": 1}}]
    spec = load_sweep(write_sweep(tmp_path, methods=["ttrl"], cohorts=["tiny-one"], cells=cells))
    planned, _ = plan(spec)
    assert [c.run_id for c in planned] == ["ttrl-tiny-one-s0", "ttrl-tiny-one-budget-matched-s0"]
    result = run_sweep(spec)
    assert result["ran"] == ["ttrl-tiny-one-s0", "ttrl-tiny-one-budget-matched-s0"]
    runs = Path(spec.output_dir) / "runs"
    plain = json.loads((runs / "ttrl-tiny-one-s0" / "run.json").read_text())
    variant = json.loads((runs / "ttrl-tiny-one-budget-matched-s0" / "run.json").read_text())
    assert plain["tag"] == "" and variant["tag"] == "budget-matched"
    assert "rollout:\n  backend: hf\n  prompts_per_step: 4" in (runs / variant["run_id"] / "config.yaml").read_text()
    # eval.every=1 over 2 steps: base, the step-1 point, final (the last step is the final evaluation)
    assert variant["phases"] == ["base", "step-000001", "final"] and plain["phases"] == ["base", "final"]
    assert (runs / variant["run_id"] / "eval" / "step-000001" / "a0").is_dir()


def test_bad_cells_are_refused_with_the_fix(tmp_path):
    for cells, msg in (([{"method": "ttrl", "cohort": "tiny-one", "set": {"run.steps": 3}}], "no tag"),
                       ([{"method": "ttrl", "cohort": "tiny-one", "seeds": [1]}], "'seeds' is unknown"),
                       ([{"method": "ttrl", "cohort": "tiny-one", "tag": "x", "set": [1]}], "must be a mapping")):
        with pytest.raises(ConfigError, match=msg):
            load_sweep(write_sweep(tmp_path, cells=cells))


def test_a_cell_claimed_by_another_worker_is_left_to_it(tmp_path):
    """Two workers on one grid: a cell whose claim is held elsewhere is reported and not run; ``threads`` reaches
    every cell's config."""
    from corl_bench.train.sweep import claim

    spec = load_sweep(write_sweep(tmp_path, methods=["ttrl"], cohorts=["tiny-one", "tiny-two"]))
    busy = Cell("ttrl", "tiny-two", 0)
    with claim(spec, busy) as mine:  # this test process plays the other worker
        assert mine
        result = run_sweep(spec, threads=1)
    assert result["ran"] == ["ttrl-tiny-one-s0"] and result["elsewhere"] == ["ttrl-tiny-two-s0"]
    assert not (Path(spec.output_dir) / "runs" / "ttrl-tiny-two-s0").exists()
    config = (Path(spec.output_dir) / "runs" / "ttrl-tiny-one-s0" / "config.yaml").read_text()
    assert "threads: 1" in config
    again = run_sweep(spec, threads=1)  # the claim is free now: the cell runs, the finished one is skipped
    assert again["finished"] == ["ttrl-tiny-one-s0"] and again["ran"] == ["ttrl-tiny-two-s0"]


def test_a_kept_grid_resumes_on_another_machine_and_tables_read_it_without_weights(tmp_path):
    import shutil

    from corl_bench.report.collect import collect_results

    keep = tmp_path / "tracked" / "study"
    spec = load_sweep(write_sweep(tmp_path, methods=["ttrl"], cohorts=["tiny-one"], keep=str(keep)))
    assert run_sweep(spec)["ran"] == ["ttrl-tiny-one-s0"]
    kept = keep / "runs" / "ttrl-tiny-one-s0"
    assert not (kept / "checkpoints").exists() and not list(kept.rglob("*.safetensors"))
    assert sorted(p.name for p in kept.iterdir()) == ["config.yaml", "env.json", "eval", "metrics.jsonl", "run.json",
                                                      "samples.jsonl"]
    assert (Path(spec.output_dir) / "runs" / "ttrl-tiny-one-s0" / "checkpoints").is_dir()  # kept, not pruned
    original = collect_results(Path(spec.output_dir))
    shutil.rmtree(spec.output_dir)  # a fresh clone: only the tracked folder is there
    again = run_sweep(spec)
    assert again["finished"] == ["ttrl-tiny-one-s0"] and not again["ran"]
    assert not (Path(spec.output_dir) / "runs" / "ttrl-tiny-one-s0").exists()
    assert repr(collect_results(keep)) == repr(original).replace(str(spec.output_dir), str(keep))


def test_prune_deletes_a_kept_cells_checkpoints_and_needs_keep(tmp_path):
    keep = tmp_path / "tracked"
    spec = load_sweep(write_sweep(tmp_path, methods=["ttrl"], cohorts=["tiny-one"], keep=str(keep), prune=True))
    assert spec.prune and run_sweep(spec)["ran"] == ["ttrl-tiny-one-s0"]
    cell = Path(spec.output_dir) / "runs" / "ttrl-tiny-one-s0"
    assert (cell / "run.json").is_file() and not (cell / "checkpoints").exists()
    assert (keep / "runs" / "ttrl-tiny-one-s0" / "metrics.jsonl").is_file()
    (tmp_path / "b").mkdir()
    with pytest.raises(ConfigError, match="set keep"):
        load_sweep(write_sweep(tmp_path / "b", prune=True))
