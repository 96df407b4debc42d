#!/usr/bin/env python
"""Fidelity of real VLM architectures through corl-bench, on tiny random checkpoints (no download): for each
architecture of corl_bench.models.tiny_vlm, whether the prompt ids equal the processor's apply_chat_template, and the
largest |engine log-prob - training forward log-prob| over sampled tokens on the hf and fast engines.

    python scripts/vlm_fidelity.py [--out DIR] [ARCH ...]
"""

from __future__ import annotations

import argparse
import copy
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    import torch

    from corl_bench.config import AgentSpec, GRPOConfig
    from corl_bench.models.images import codec_of
    from corl_bench.models.load import load_model
    from corl_bench.models.tiny_vlm import ARCHS, build, noise_image
    from corl_bench.rollout import SamplingParams
    from corl_bench.rollout.request import Request
    from corl_bench.train.agent import Agent
    from corl_bench.train.boundary import TrainSample

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("archs", nargs="*", default=list(ARCHS))
    ap.add_argument("--out", type=Path, default=None, help="where the checkpoints are built (default: a temp dir)")
    args = ap.parse_args(argv)
    root = args.out or Path(tempfile.mkdtemp(prefix="vlm-fidelity-"))
    print("| arch | prompt ids = apply_chat_template | ids | image tokens | max abs log-prob gap, hf | fast |")
    print("|---|---|---|---|---|---|")
    for arch in args.archs:
        model, tok = load_model(str(build(arch, root / arch)))
        codec = codec_of(tok)
        images = [noise_image(w, h, i) for i, (w, h) in enumerate([(40, 30), (24, 56)])]
        questions = ["What is 2+3?", "How many squares are shaded?"]
        reqs = [Request(text=codec.chat(q, 1), images=(im,)) for q, im in zip(questions, images)]
        gaps = []
        for backend in ("hf", "fast"):
            ag = Agent(AgentSpec("a0", arch), copy.deepcopy(model), tok, GRPOConfig(), backend=backend)
            comps = ag.generate(reqs, SamplingParams(n=4, temperature=1.0, max_new_tokens=16, seed=1))
            samples = [TrainSample(r, c) for r, row in zip(reqs, comps) for c in row]
            fwd = ag.forward([s.request for s in samples], [s.completion for s in samples])
            engine = torch.tensor([lp for s in samples for lp in s.completion.logprobs])
            gaps.append((fwd.logp.detach()[fwd.mask.bool()] - engine).abs().max().item())
        ids, _ = codec.prompt(reqs[0])
        messages = [{"role": "user", "content": [{"type": "image", "image": images[0]},
                                                 {"type": "text", "text": questions[0]}]}]
        ref = codec.processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                  return_dict=True, return_tensors="pt")
        same = ids == ref["input_ids"][0].tolist()
        print(f"| {arch} | {'yes' if same else 'NO'} | {len(ids)} | {ids.count(codec.image_token_id)} | "
              f"{gaps[0]:.1e} | {gaps[1]:.1e} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
