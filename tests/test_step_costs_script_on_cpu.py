"""``scripts/step_costs.py`` (issue 40, item 4) without the models: every cell's config is a valid run config that
says what the cell's key says, and the page from stored records (measured, refused and missing cells)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import load_script

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture()
def sc(tmp_path, monkeypatch):
    mod = load_script("step_costs")
    monkeypatch.setattr(mod, "OUT", tmp_path / "step-costs")
    monkeypatch.setattr(mod, "PAGE", tmp_path / "step-costs.md")
    return mod


def test_the_grid_is_the_issues_three_models_two_sample_counts_three_token_caps(sc) -> None:
    keys = sc.cells()
    assert len(keys) == 18 and len(set(keys)) == 18
    assert {sc._parse(k)[:2] for k in keys} == {("qwen2.5-coder-0.5b", 0), ("qwen2.5-coder-0.5b", 16),
                                                 ("qwen2.5-coder-1.5b", 16)}
    assert {sc._parse(k)[2:] for k in keys} == {(k, t) for k in (4, 8) for t in (32, 128, 256)}
    with pytest.raises(SystemExit, match="unknown cell"):
        sc._parse("qwen7b-full/k4/t32")


@pytest.mark.parametrize("key", ["qwen05b-full/k8/t256", "qwen15b-lora/k4/t32"])
def test_a_cells_config_loads_as_a_run_config_with_the_cells_shape(sc, tmp_path, key) -> None:
    import yaml

    from corl_bench.config import load_config

    path = sc._write_config(sc.config(key, tmp_path / "out", str(tmp_path / "data"), 2), tmp_path / "cell.yaml")
    cfg = load_config(str(path), [])
    family, rank, k, t = sc._parse(key)
    assert (cfg.rollout.prompts_per_step, cfg.rollout.samples_per_prompt, cfg.rollout.max_new_tokens) == (8, k, t)
    assert [(a.family, a.lora_rank or 0) for a in cfg.cohort.agents] == [(family, rank)]
    assert cfg.method.name == "ttrl" and cfg.run.steps == 2 and cfg.model.profile == "hf" and cfg.model.threads == 2
    assert not cfg.eval.before and cfg.eval.max_problems == 1
    assert yaml.safe_load(path.read_text()) == sc.config(key, tmp_path / "out", str(tmp_path / "data"), 2)


def test_the_page_shows_measured_refused_and_missing_cells(sc) -> None:
    step = {"rollout": 10.0, "forward": 2.0, "reward": 0.0, "update": 4.0, "mean_length": 30.5, "clipped": 0.9}
    recs = {"qwen05b-full/k4/t32": {"estimate_gb": 11.0, "peak_gb": 10.0, "threads": 2, "cpu": "AMD EPYC x2",
                                    "loadavg_start": 0.1, "loadavg_end": 1.9, "commit": "abcdef0123",
                                    "resolved": ["hf profile: memory.micro_batch=32 memory.logit_chunk=256 (fit to 24 GB)"],
                                    "steps": [{**step, "update": 9.0}, step]},
            "qwen15b-lora/k8/t256": {"estimate_gb": 30.0, "refused": "error: one training step needs about 30 GB",
                                     "threads": 2, "cpu": "AMD EPYC x2", "commit": "abcdef0123"}}
    sc.OUT.mkdir(parents=True)
    (sc.OUT / "cells.json").write_text(json.dumps(recs), encoding="utf-8")
    page = sc.report()
    rows = [ln for ln in page.splitlines() if ln.startswith("| qwen")]
    assert len(rows) == 18
    first = rows[0].split(" | ")
    assert first[:4] == ["| qwen05b-full", "4", "32", "30.5"] and first[7] == "16" and first[8] == "21"
    assert "1.10" in rows[0] and "memory.micro_batch=32 memory.logit_chunk=256" in rows[0]
    assert "refused: error: one training step needs about 30 GB" in rows[-1]
    assert sum("– |" in r for r in rows) == 16
    assert "AMD EPYC x2" in page and "abcdef0" in page and "0.1–1.9" in page


def test_a_lean_cell_turns_off_kept_host_memory_and_gets_its_own_row(sc, tmp_path) -> None:
    from corl_bench.config import load_config

    key = "qwen05b-lora/k4/t32" + sc.LEAN
    assert sc._parse(key) == sc._parse("qwen05b-lora/k4/t32")
    cfg = load_config(str(sc._write_config(sc.config(key, tmp_path / "o", "d", 1), tmp_path / "c.yaml")), [])
    assert cfg.memory.keep_host_memory is False and cfg.cohort.agents[0].lora_rank == 16
    assert sc.config("qwen05b-lora/k4/t32", tmp_path / "o", "d", 1).get("memory") is None  # the default allocator
    step = {"rollout": 1.0, "forward": 1.0, "reward": 0.0, "update": 1.0, "mean_length": 32.0, "clipped": 1.0}
    sc.OUT.mkdir(parents=True)
    (sc.OUT / "cells.json").write_text(json.dumps({key: {
        "estimate_gb": 13.3, "peak_gb": 9.3, "threads": 1, "cpu": "AMD EPYC x2", "loadavg_start": 2.0,
        "loadavg_end": 3.0, "commit": "abcdef0123", "resolved": ["memory.micro_batch=16 memory.logit_chunk=256 (fit to 25 GB on cpu; none of "
                     "memory.micro_batch, memory.logit_chunk, memory.shared_prefix was set)"], "steps": [step, step]}}), encoding="utf-8")
    rows = [ln for ln in sc.report().splitlines() if ln.startswith("| qwen")]
    assert len(rows) == 19 and rows[-1].startswith("| qwen05b-lora | 4 | 32 (lean allocator) |") and "1.43" in rows[-1]
    assert rows[-1].endswith("| memory.micro_batch=16 memory.logit_chunk=256 | 1 (2.0–3.0) |")  # threads (load)


def test_a_cell_is_judged_by_the_current_estimate_of_the_settings_it_ran_with(sc) -> None:
    step = {"rollout": 1.0, "forward": 1.0, "reward": 0.0, "update": 1.0, "mean_length": 32.0, "clipped": 1.0}
    rec = {"estimate_gb": 13.3, "estimate_head_gb": 9.9, "estimate_head_commit": "fedcba9876", "peak_gb": 9.0,
           "threads": 2, "cpu": "AMD EPYC x2", "loadavg_start": 0.0, "loadavg_end": 1.0, "commit": "abcdef0123",
           "resolved": ["memory.micro_batch=16 memory.logit_chunk=256 (fit to 25 GB on cpu; none of memory.micro_batch, "
                        "memory.logit_chunk, memory.shared_prefix was set)"], "steps": [step, step]}
    assert sc.as_run(rec) == {"micro_batch": 16, "logit_chunk": 256}  # pinned when re-estimating
    sc.OUT.mkdir(parents=True)
    (sc.OUT / "cells.json").write_text(json.dumps({"qwen05b-lora/k4/t32": rec}), encoding="utf-8")
    page = sc.report()
    row = next(ln for ln in page.splitlines() if ln.startswith("| qwen05b-lora | 4 | 32 |"))
    assert "| 9.0 | 9.9 | 1.10 |" in row  # the current estimate, not the one recorded when the cell ran (13.3)
    assert "estimates by fedcba9" in page and "within 15 % of the measured peak in 1 of 1 measured cells" in page


def test_the_page_lists_what_validate_refuses_in_one_line(sc) -> None:
    sc.OUT.mkdir(parents=True)
    (sc.OUT / "refusals.json").write_text(json.dumps({"qwen05b-full/k8/t256 memory.micro_batch=64": {
        "estimate_gb": 234.4, "refusal": "error: one training step needs about 234.4 GB on cpu", "commit": "abc"}}),
        encoding="utf-8")
    page = sc.report()
    assert "## What does not fit" in page
    assert "- `qwen05b-full/k8/t256 memory.micro_batch=64` (estimate 234.4 GB): `error: one training step needs " \
           "about 234.4 GB on cpu`" in page


def test_only_a_memory_refusal_is_recorded_any_other_failure_raises(sc) -> None:
    """A cell whose run failed for another reason (here: a method that did not import) must not be recorded as a
    cell that does not fit (it was, once, and the next --run skipped it)."""
    line = ("error: one training step needs about 44.9 GB on cpu (estimated from the models' architectures) and it "
            "has 25.3 GB; set memory.micro_batch=8")
    assert sc.refused("k", 2, "loading...\n" + line + "\n") == line
    with pytest.raises(RuntimeError, match="nothing was recorded .*cannot import"):
        sc.refused("k", 2, "error: method.name: cannot import 'corl_bench.trainers.corl' while discovering methods")
    with pytest.raises(RuntimeError, match="exit 137"):
        sc.refused("k", 137, "")
