"""Greedy accuracy of real models on a generated arithmetic suite, in the formats a cohort asks them (issue 40):
how the Qwen setting's universe ``arith-mul`` was sized, and how anyone checks it on their machine.

    python scripts/arith_calibration.py --models qwen2.5-coder-0.5b --suite arith-mul-dev [--prompts bare,paper]
    python scripts/arith_calibration.py --models smol:bare,gemma3-270m:fewshot-arith --suite arith-mul-dev

Each model is asked every problem of ``--suite`` (a generated suite of :mod:`corl_bench.hf.arith`; choose settings
on ``arith-mul-dev``, report on ``arith-mul-heldout`` once) as the hf profile asks a training prompt
(:meth:`corl_bench.hf.profile.HFProfile.render`: ``paper``, ``bare``, ``fewshot-arith``), greedy, at most
``--max-new-tokens``, graded by the training reward's extractor and the math grader. ``model:prompt`` fixes one
prompt for a model; a bare model name takes every ``--prompts``. Prints one line per model and prompt (accuracy,
its 95 % Wilson interval, completion lengths in tokens, seconds) and writes them as JSON with ``--out``. Not part of
the test suite (it needs the installed models: ``make qwen``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from real_base import wilson  # noqa: E402 - the base table's Wilson interval, next to this script


def score(profile: Any, model_name: str, model: Any, tok: Any, prompt: str, items: list, max_new_tokens: int,
          batch: int) -> dict:
    """Greedy accuracy of one loaded model asked in one format on ``items``."""
    import torch

    from corl_bench.grading.verifier import extract_normalized, normalize_answer

    stops = profile.stop_strings(prompt)
    texts = [profile.render(it, "original", model_name, prompt).text for it in items]
    t0, outs = time.time(), []
    for i in range(0, len(texts), batch):
        enc = tok(texts[i:i + batch], return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False,
                                 pad_token_id=tok.pad_token_id)
        outs += tok.batch_decode(out[:, enc.input_ids.shape[1]:], skip_special_tokens=True)
    for s in stops:
        outs = [o.split(s)[0] for o in outs]
    right = sum(extract_normalized(o) == normalize_answer(it.gold) for it, o in zip(items, outs))
    lens = [len(tok(o, add_special_tokens=False).input_ids) for o in outs]
    lo, hi = wilson(right, len(items))
    return {"model": model_name, "prompt": prompt, "n": len(items), "correct": right, "accuracy": right / len(items),
            "ci95": [lo, hi], "mean_tokens": sum(lens) / len(lens), "max_tokens": max(lens),
            "seconds": round(time.time() - t0, 1), "example": outs[0][:160]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="qwen2.5-coder-0.5b")
    ap.add_argument("--suite", default="arith-mul-dev")
    ap.add_argument("--prompts", default="bare")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    import torch

    from corl_bench.hf.arith import SUITES, suite_items

    if args.suite not in SUITES:
        ap.error(f"--suite must be one of {', '.join(SUITES)} (got {args.suite!r})")
    if args.threads:
        torch.set_num_threads(args.threads)
    from corl_bench.hf.profile import HFProfile

    items = suite_items(args.suite)
    profile = HFProfile()
    rows = []
    for spec in args.models.split(","):
        name, _, fixed = spec.partition(":")
        model, tok = profile.load(name)  # once per model; the profile renders with this tokenizer
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
        for prompt in [fixed] if fixed else args.prompts.split(","):
            r = score(profile, name, model, tok, prompt, items, args.max_new_tokens, args.batch) | {
                "suite": args.suite, "max_new_tokens": args.max_new_tokens}
            rows.append(r)
            print(f"{name:20s} {prompt:14s} {args.suite}: {r['correct']}/{r['n']} = {100 * r['accuracy']:.1f} % "
                  f"[{100 * r['ci95'][0]:.1f}, {100 * r['ci95'][1]:.1f}]  tokens mean {r['mean_tokens']:.1f} max "
                  f"{r['max_tokens']}  {r['seconds']:.0f} s  e.g. {r['example'][:60]!r}", flush=True)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
