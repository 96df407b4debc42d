#!/usr/bin/env python
"""The least time a finished cell's work can take on this machine: its matrix products at the measured peak rate.

    python scripts/cell_floor.py RUN_DIR                          # rates measured here (fp32, torch's threads)
    python scripts/cell_floor.py RUN_DIR --peak-json results/bench/peak-20261207.json   # rates of another machine
    python scripts/cell_floor.py RUN_DIR --wall-json results/bench/cell-speed-corl-s0.json --side old --json out.json

Issue 41 asks for a real-model cell at half its wall time and an evaluation twice as fast with identical results.
An engineering change leaves the work as it is: the same tokens through the same matrix products. This script counts
that work from what a finished run directory records and divides it by the fastest rate this CPU multiplies
matrices at, which gives a time no implementation of the same computation can beat. A target below that time
cannot be met without changing the numbers (precision) or the work (fewer tokens).

The count is a lower bound on purpose:

* only the products with the weights (the decoder layers' and the LM head's): no attention scores, norms,
  activations, sampling, Python, padding;
* rollouts: each prompt prefilled once for its K samples (only the LM head's last position), then one body and
  head product per further token; training: each prompt's tokens once per prompt group (a shared prefix), every
  completion token but the last through the body and every completion token through the head, forward + backward
  = 3x the forward (``6 x weights x tokens``); evaluation: the prompt head every problem of a benchmark shares once,
  each problem's own part once for all its decodings, then as rollouts;
* training prompts: the shortest prompt the run logged in ``samples.jsonl`` for every prompt of every step;
  completions: ``len/mean`` x prompts x K of every step in ``metrics.jsonl``; evaluation: the stored predictions'
  prompts (re-tokenised without special tokens: a chat template's own tokens are not counted) and ``n_tokens``.

Rates (GFLOP/s), measured in this process at each model's own shapes, the best of five timings and of two ways to
multiply (``linear(x, W)`` and ``(W @ x^T)^T``): the body's products at the MLP up-projection's rate (tokens x hidden
x intermediate) and the LM head's at the head's (tokens x hidden x vocabulary), at 1024 tokens for training and
evaluation (whose batches an implementation may size freely); a rollout's at prompts x samples rows, the most rows
one model's decode step has (the cell fixes them). ``--peak-json`` reads the 1024-token rates of another machine
from a ``scripts/bench_suite.py --rows peak`` JSON instead (one timing each, ``linear`` only, which can read low and
raise the floor; the rollout then at the same rates, which lowers it): a cruder bound than one measured here.
``floor_best_s`` puts every product at the single best rate (the most generous bound). The models' sizes come from ``corl_bench.hf.fit.KNOWN`` (published config values), so a run's agents must be
model entries listed there.

The measured side: the run's own phase timings (``run.json``) or, with ``--wall-json``, a
``scripts/cell_speed.py`` JSON's best run of ``--side`` (same cell, counted from this run directory). Reported:
each phase's floor, its measured time and their ratio (the share of the peak the phase ran at), and what halving
the cell (or the evaluation) would need: ``floor / (measured / 2)``; above 1, no change that leaves the numbers as
they are can do it on this machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
PEAK_TOKENS = 1024  # rows of the rate's products (scripts/bench_suite.py's peak row uses the same)
PHASES = ("rollout", "train", "eval")


def _jsonl(path: Path) -> list[dict]:
    from corl_bench.results import read_jsonl

    return read_jsonl(path, SystemExit) if path.exists() else []


def _common_head(ids: list[list[int]]) -> int:
    """Leading tokens every row shares, each row keeping one of its own (0 for one row)."""
    if len(ids) < 2:
        return 0
    shortest = min(len(x) for x in ids) - 1
    h = 0
    while h < shortest and all(x[h] == ids[0][h] for x in ids):
        h += 1
    return h


def count_work(run: Path, arch_of: Callable[[str], object], tokenize: Callable[[str, str], list[int]]) -> dict:
    """Per agent: body / head multiply-adds (FLOPs = 2 x multiply-adds) of its rollouts, training and evaluation,
    and the token counts they come from. ``arch_of(family)``: a :class:`corl_bench.hf.fit.Arch`;
    ``tokenize(family, text)``: token ids without special tokens."""
    record = json.loads((run / "run.json").read_text())
    import yaml

    cfg = yaml.safe_load((run / "config.yaml").read_text())
    prompts, k = int(cfg["rollout"]["prompts_per_step"]), int(cfg["rollout"]["samples_per_prompt"])
    metrics, samples = _jsonl(run / "metrics.jsonl"), _jsonl(run / "samples.jsonl")
    out: dict = {}
    for agent in record["agents"]:
        name, family = agent["name"], agent["family"]
        arch = arch_of(family)
        body, head = arch.layers * arch.layer_params, arch.vocab * arch.hidden
        rows = [m for m in metrics if m.get("agent") == name and "len/mean" in m]
        logged = [len(tokenize(family, s["prompt"])) for s in samples if s.get("agent") == name]
        if rows and not logged:
            raise SystemExit(f"{run}: no prompt of agent {name} in samples.jsonl (run.log_samples_every=0?); the "
                             "training count needs one")
        p = min(logged) if logged else 0
        steps, completions = len(rows), sum(m["len/mean"] * prompts * k for m in rows)
        trains = 3 if any("loss" in m for m in rows) else 0  # forward + backward; a generating-only model: no loss
        further = max(0.0, completions - steps * prompts * k)  # every completion token after a row's first
        work = {"rollout": {"body": steps * prompts * p + further, "head": steps * prompts + further},
                "train": {"body": trains * (steps * prompts * p + further), "head": trains * completions},
                "eval": {"body": 0.0, "head": 0.0}}
        decoded = 0
        for path in sorted((run / "eval").glob(f"*/{name}/*.jsonl")):
            preds = _jsonl(path)
            prompt_of = {str(r["problem_id"]): r["prompt"] for r in preds}  # a problem's decodings share it
            ids = [tokenize(family, text) for text in prompt_of.values()]
            shared = _common_head(ids)
            own = sum(len(x) - shared for x in ids)
            n = [int(r["n_tokens"]) for r in preds if int(r["n_tokens"]) > 0]
            work["eval"]["body"] += shared + own + sum(x - 1 for x in n)
            work["eval"]["head"] += len(ids) + sum(x - 1 for x in n)  # one prefill's head per problem
            decoded += sum(n)
        out[name] = {"family": family, "body_params": body, "head_params": head, "steps": steps,
                     "rollout_rows": prompts * k,
                     "train_prompt_tokens": p, "completion_tokens": completions, "eval_tokens": decoded,
                     "trains": bool(trains),
                     "flops": {ph: 2.0 * (w["body"] * body + w["head"] * head) for ph, w in work.items()},
                     "flops_by_part": {ph: {"body": 2.0 * w["body"] * body, "head": 2.0 * w["head"] * head}
                                       for ph, w in work.items()}}
    return out


def _rate(shape: tuple[int, int, int], dtype: str, seconds: float) -> float:
    """GFLOP/s of ``(m x k) @ (n x k)^T`` computed the faster of two ways: ``linear(x, W)`` and ``(W @ x^T)^T``
    (at a few rows and a wide ``n`` the second runs up to 1.6x faster here)."""
    import torch

    m, k, n = shape
    dt = getattr(torch, dtype)
    x, w = torch.randn(m, k).to(dt), torch.randn(n, k).to(dt)
    best = 0.0
    for f in (lambda: torch.nn.functional.linear(x, w), lambda: torch.mm(w, x.t())):
        f()
        reps, t0 = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - t0) < seconds or reps < 2:
            f()
            reps += 1
        best = max(best, 2.0 * m * k * n * reps / elapsed / 1e9)
    return best


def measured_rates(families: list[str], arch_of: Callable[[str], object], dtype: str, rows: int,
                   tries: int = 5) -> dict:
    """``family -> {"body", "head", "rollout_body", "rollout_head": GFLOP/s}`` measured here at each model's own
    shapes, the best of ``tries`` timings each (a low rate would raise the floor: the best keeps it a lower bound):
    body and head at 1024 rows, and at ``rows`` (a rollout's prompts x samples, the most rows a decode step of one
    model can have)."""

    def best(shape: tuple[int, int, int]) -> float:
        return max(_rate(shape, dtype, 0.3) for _ in range(tries))

    out = {}
    for f in families:
        a = arch_of(f)
        out[f] = {"body": best((PEAK_TOKENS, a.hidden, a.intermediate)), "head": best((PEAK_TOKENS, a.hidden, a.vocab)),
                  "rollout_body": best((rows, a.hidden, a.intermediate)), "rollout_head": best((rows, a.hidden, a.vocab))}
    return out


def json_rates(path: Path, families: list[str], dtype: str) -> dict:
    """The same from a ``scripts/bench_suite.py --rows peak`` JSON (its ``rates_gflops``: ``model/mlp`` and
    ``model/lm_head``; the model named by its entry, e.g. ``qwen2.5-0.5b`` for ``qwen2.5-coder-0.5b``)."""
    rates = json.loads(path.read_text())["rows"]["peak"]["rates_gflops"]
    alias = {"qwen2.5-coder-0.5b": "qwen2.5-0.5b"}
    out = {}
    for f in families:
        key = alias.get(f, f)
        if f"{key}/mlp" not in rates:
            raise SystemExit(f"{path} has no rate of {key}; measure here instead (leave out --peak-json)")
        out[f] = {"body": rates[f"{key}/mlp"][dtype], "head": rates[f"{key}/lm_head"][dtype]}
    return out


def floors(work: dict, rates: dict) -> dict:
    """Per phase: seconds at each product's own rate (``floor_s``) and at the best rate of all (``floor_best_s``)."""
    best = max(r for fam in rates.values() for r in fam.values()) * 1e9
    out = {}
    for ph in PHASES:
        def rate(family: str, part: str) -> float:  # a rollout's products at its own rows where measured
            r = rates[family]
            return (r.get(f"rollout_{part}", r[part]) if ph == "rollout" else r[part]) * 1e9

        at_own = sum(a["flops_by_part"][ph]["body"] / rate(a["family"], "body") +
                     a["flops_by_part"][ph]["head"] / rate(a["family"], "head") for a in work.values())
        out[ph] = {"tflop": sum(a["flops"][ph] for a in work.values()) / 1e12, "floor_s": at_own,
                   "floor_best_s": sum(a["flops"][ph] for a in work.values()) / best}
    return out


def measured(run: Path, wall_json: Path | None, side: str) -> dict:
    """Seconds of the phases this script bounds: train (rollout + training, as the runner times them), eval."""
    if wall_json is None:
        t = json.loads((run / "run.json").read_text()).get("timings", {})
        return {"train": t.get("train"), "eval": t.get("eval_final"), "source": str(run / "run.json")}
    report = json.loads(wall_json.read_text())
    best = min(report["runs"][side], key=lambda r: r["wall_s"])
    return {"train": best["phases_s"].get("train"), "eval": best["phases_s"].get("eval_final"),
            "wall": best["wall_s"], "source": f"{wall_json} ({side})", "machine": report.get("machine")}


def verdict(fl: dict, wall: dict) -> dict:
    """Share of the peak each measured phase ran at, and what halving it needs (``> 1``: impossible at these rates), with
    every product at its own shape's rate and (``..._best``) at the best rate of all."""
    parts = {"train": ("rollout", "train"), "eval": ("eval",), "cell": PHASES}
    secs_of = {"train": wall.get("train"), "eval": wall.get("eval"),
               "cell": (wall["train"] + wall["eval"]) if wall.get("train") and wall.get("eval") else None}
    out = {}
    for name, phases in parts.items():
        secs = secs_of[name]
        if not secs:
            continue
        own = sum(fl[ph]["floor_s"] for ph in phases)
        best = sum(fl[ph]["floor_best_s"] for ph in phases)
        out[name] = {"measured_s": secs, "floor_s": own, "floor_best_s": best, "share_of_peak": own / secs,
                     "halving_needs": own / (secs / 2), "halving_needs_best": best / (secs / 2)}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path, help="a finished run directory (config.yaml, run.json, metrics, predictions)")
    ap.add_argument("--peak-json", type=Path, default=None, help="rates from scripts/bench_suite.py --rows peak")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    ap.add_argument("--threads", type=int, default=0, help="torch threads for the measured rates (0: as set)")
    ap.add_argument("--wall-json", type=Path, default=None, help="a scripts/cell_speed.py JSON (else run.json)")
    ap.add_argument("--side", default="old", choices=("old", "new"), help="which side of --wall-json")
    ap.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = ap.parse_args()
    if not (args.run / "run.json").exists():
        raise SystemExit(f"{args.run} is not a run directory (no run.json); give a finished run's directory")
    import torch

    from corl_bench.hf.fit import KNOWN
    from corl_bench.models.load import default_cache_root, load_tokenizer, model_folder
    from corl_bench.train.precision import machine_facts

    if args.threads:
        torch.set_num_threads(args.threads)

    def arch_of(family: str):
        if family not in KNOWN:
            raise SystemExit(f"agent family {family!r} has no published sizes in corl_bench.hf.fit.KNOWN; this "
                             "script counts model entries only")
        return KNOWN[family]

    tokenizers: dict = {}

    def tokenize(family: str, text: str) -> list[int]:
        if family not in tokenizers:
            tokenizers[family] = load_tokenizer(model_folder(family, default_cache_root()))
        return tokenizers[family](text, add_special_tokens=False)["input_ids"]

    work = count_work(args.run, arch_of, tokenize)
    rollout_rows = next(iter(work.values()))["rollout_rows"]
    families = sorted({a["family"] for a in work.values()})
    rates = json_rates(args.peak_json, families, args.dtype) if args.peak_json else \
        measured_rates(families, arch_of, args.dtype, rows=rollout_rows)
    fl, wall = floors(work, rates), measured(args.run, args.wall_json, args.side)
    # the machine the rates are of: this one, or the one that wrote --peak-json
    machine = json.loads(args.peak_json.read_text())["rows"]["peak"].get("machine") if args.peak_json else \
        machine_facts()
    env = json.loads((args.run / "env.json").read_text()) if (args.run / "env.json").exists() else {}
    report = {"run": str(args.run), "run_commit": env.get("git_commit"), "dtype": args.dtype, "rates_gflops": rates,
              "rates_from": str(args.peak_json) if args.peak_json else "measured here", "machine": machine,
              "work": work, "floors": fl, "measured": wall,
              "verdict": verdict(fl, wall)}
    for ph in PHASES:
        print(f"{ph:8s} {fl[ph]['tflop']:7.2f} TFLOP  floor {fl[ph]['floor_s']:7.1f} s "
              f"(at the best rate {fl[ph]['floor_best_s']:.1f} s)")
    for name, v in report["verdict"].items():
        print(f"{name:8s} measured {v['measured_s']:7.1f} s, floor {v['floor_s']:7.1f} s: ran at "
              f"{100 * v['share_of_peak']:.0f} % of the peak; halving it needs {100 * v['halving_needs']:.0f} % "
              f"({'impossible at these rates' if v['halving_needs'] > 1 else 'not excluded by the floor'}; "
              f"{100 * v['halving_needs_best']:.0f} % with every product at the best rate)")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
