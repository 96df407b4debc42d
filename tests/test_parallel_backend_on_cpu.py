"""``run.backend=auto`` (corl_bench.train.parallel): the rule's arithmetic, each case that keeps ``local``, a value the
user set winning, the resolved backend written into the config with the note validate prints, and the hf profile's
agent sizes. That parallel agents give the local results is tests/test_ray_backend_on_cpu.py's (its Ray run now
also evaluates the agents at the same time)."""

from __future__ import annotations

import pytest

from corl_bench.config import load_config
from corl_bench.train import parallel
from corl_bench.train.parallel import MIN_GAIN, MIN_WEIGHTS, choose_backend, predicted_gain

BIG = 2 * MIN_WEIGHTS


def test_predicted_gain_is_thread_scaling_times_balance():
    # two equal agents, one core each does 60 % of two cores' work: 2 * 60 / 100 = 1.2
    assert predicted_gain(2, 100.0, 60.0, [5, 5]) == pytest.approx((1.2, 1.0))
    # a 1:3 pair waits for the larger: balance (1 + 3) / (2 * 3)
    gain, balance = predicted_gain(2, 100.0, 60.0, [1, 3])
    assert balance == pytest.approx(4 / 6) and gain == pytest.approx(1.2 * 4 / 6)
    # an unknown size takes the mean of the known ones; all unknown: equal
    assert predicted_gain(2, 100.0, 60.0, [None, 4])[1] == pytest.approx(1.0)
    assert predicted_gain(3, 90.0, 30.0, [None, None, None]) == pytest.approx((1.0, 1.0))


@pytest.mark.parametrize("n, on_gpu, ray_installed, cores, why", [
    (1, False, True, 2, "one agent"),
    (2, True, True, 16, "CPUs only"),
    (2, False, False, 16, "Ray is not installed"),
    (3, False, True, 2, "2 cores for 3 agents"),
])
def test_local_is_kept_where_parallel_cannot_help(n, on_gpu, ray_installed, cores, why):
    c = choose_backend(n, [BIG] * n, on_gpu=on_gpu, cores=cores, ray_installed=ray_installed, rates=(100.0, 90.0))
    assert c.backend == "local" and why in c.reason


def test_balanced_agents_that_scale_badly_go_parallel_and_unbalanced_ones_do_not():
    ray = choose_backend(2, [BIG, BIG], on_gpu=False, cores=16, ray_installed=True, rates=(100.0, 70.0))
    assert (ray.backend, ray.cpus_per_agent) == ("ray", 8) and ray.gain == pytest.approx(1.4)
    assert "predicted 1.40x" in ray.reason
    # what the 2-core EPYC measured: one core does ~55 % of two; a balanced pair predicted 1.1x stays in turns
    assert choose_backend(2, [BIG, BIG], on_gpu=False, cores=2, ray_installed=True, rates=(100.0, 55.0)).backend \
        == "local"
    local = choose_backend(2, [BIG, 3 * BIG], on_gpu=False, cores=16, ray_installed=True, rates=(100.0, 70.0))
    assert local.backend == "local" and local.gain < MIN_GAIN and f"under {MIN_GAIN}x" in local.reason
    # a user's cpus_per_agent is the share the prediction uses and the one that runs
    mine = choose_backend(2, [BIG, BIG], on_gpu=False, cores=16, cpus_per_agent=3, ray_installed=True,
                          rates=(100., 70.))
    assert mine.cpus_per_agent == 3 and "on 3" in mine.reason


def test_a_busy_machine_keeps_local_without_timing(monkeypatch):
    from corl_bench.train import precision

    monkeypatch.setattr(precision, "matmul_rate", lambda *a, **k: pytest.fail("timed on a busy machine"))
    busy = choose_backend(2, [BIG, BIG], on_gpu=False, cores=2, ray_installed=True, load=1.9)
    assert busy.backend == "local" and "busy (load average 1.9 on 2 cores)" in busy.reason


def test_an_idle_machine_times_both_shapes_on_both_thread_counts(monkeypatch):
    from corl_bench.train import precision

    seen = []

    def rate(dtype, shape, seconds):  # 2 threads: 180, 1 thread: 100 at either shape -> scaling 1.8
        import torch

        seen.append((shape, torch.get_num_threads()))
        return 180.0 if torch.get_num_threads() == 2 else 100.0

    monkeypatch.setattr(precision, "matmul_rate", rate)
    c = choose_backend(2, [BIG, BIG], on_gpu=False, cores=2, ray_installed=True, load=0.0)
    assert {s for s, _ in seen} == set(parallel.SHAPES) and {t for _, t in seen} == {1, 2}
    assert c.gain == pytest.approx(2 / 1.8) and c.backend == "local" and "(1.80x)" in c.reason


def test_small_agents_and_unknown_sizes_keep_local():
    small = choose_backend(2, [MIN_WEIGHTS - 1, BIG], on_gpu=False, cores=16, ray_installed=True, rates=(100., 50.))
    assert small.backend == "local" and "too little work a step" in small.reason
    unknown = choose_backend(2, [None, BIG], on_gpu=False, cores=16, ray_installed=True, rates=(100., 50.))
    assert unknown.backend == "local" and "does not say how large" in unknown.reason


def test_the_micro_models_are_too_small_to_run_apart(monkeypatch):
    """The default cohort resolves to local under auto, measuring nothing (its models do ~1 M multiply-adds a
    token): the default micro run is the same with run.backend=auto."""
    from corl_bench.train import precision
    from corl_bench.train.runner import resolve

    monkeypatch.setattr(precision, "matmul_rate", lambda *a, **k: pytest.fail("measured for a micro cohort"))
    plan = resolve(load_config(None, ["method.name=corl", "cohort.name=cross-family", "run.backend=auto"]))
    assert plan.config.run.backend == "local"
    assert any("run.backend=local (auto: the smallest agent does 1.0 M" in n for n in plan.notes), plan.notes


def _resolved(monkeypatch, sets, choice):
    from corl_bench.train.runner import resolve

    seen = {}

    def fake(n, weights, **kw):
        seen.update(n=n, weights=weights, **kw)
        return choice

    monkeypatch.setattr(parallel, "choose_backend", fake)
    return resolve(load_config(None, ["method.name=corl", "cohort.name=cross-family", "run.backend=auto", *sets])), seen


def test_auto_is_resolved_once_into_the_config_with_its_reason(monkeypatch):
    plan, seen = _resolved(monkeypatch, [], parallel.BackendChoice("ray", 1, 1.2, "measured here"))
    assert (plan.config.run.backend, plan.config.run.cpus_per_agent) == ("ray", 1.0)
    assert seen["n"] == 2 and seen["on_gpu"] is False and seen["cpus_per_agent"] == 0
    assert any(n.startswith("run.backend=ray (auto: measured here); run.cpus_per_agent=1") for n in plan.notes)
    assert plan.config.to_dict()["run"]["backend"] == "ray"  # what config.yaml records

    plan, seen = _resolved(monkeypatch, ["run.cpus_per_agent=2"], parallel.BackendChoice("ray", 2, 1.2, "x"))
    assert seen["cpus_per_agent"] == 2 and plan.config.run.cpus_per_agent == 2.0
    assert not any("run.cpus_per_agent=" in n for n in plan.notes)  # the user's value: nothing filled

    plan, _ = _resolved(monkeypatch, [], parallel.BackendChoice("local", 0, 0.8, "unbalanced"))
    assert plan.config.run.backend == "local" and "run.backend=local (auto: unbalanced)" in plan.notes


def test_the_default_backend_is_local_and_never_measures(monkeypatch):
    from corl_bench.train.runner import resolve

    monkeypatch.setattr(parallel, "choose_backend", lambda *a, **k: pytest.fail("measured without auto"))
    plan = resolve(load_config(None, ["method.name=corl", "cohort.name=cross-family"]))
    assert plan.config.run.backend == "local" and not any("run.backend" in n for n in plan.notes)


def test_an_unknown_backend_is_refused_in_one_line_naming_auto():
    from corl_bench.config import ConfigError

    with pytest.raises(ConfigError, match=r"run.backend must be one of local, ray, auto \(got 'threads'\)"):
        load_config(None, ["run.backend=threads"])


def test_hf_agent_sizes_are_layers_plus_head_from_the_architecture():
    from corl_bench.hf.fit import KNOWN
    from corl_bench.registries import PROFILES

    cfg = load_config(None, ["model.profile=hf", "cohort.name=pair",
                             "cohort.agents=[{name: a0, family: smol}, {name: a1, family: gemma3-270m}]"])
    weights = PROFILES.get("hf").compute_weights(cfg)
    smol, gemma = KNOWN["smol"], KNOWN["gemma3-270m"]
    assert weights == [smol.layers * smol.layer_params + smol.vocab * smol.hidden,
                       gemma.layers * gemma.layer_params + gemma.vocab * gemma.hidden]
    assert 0.4 < weights[0] / weights[1] < 0.6  # SmolLM2-135M does about half of Gemma-3-270M's products a token
