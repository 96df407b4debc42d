#!/usr/bin/env python
"""Can the shipped micro models take part in a debate? One round-1 turn per problem, as ``maporl``/``maca`` ask it.

    python scripts/debate_probe.py --problems 24 --seed 7

For each pair of shipped text families (A answers, B's round-0 answer shown), the script samples round-0 answers of
``--problems`` micro training problems, builds the round-1 debate prompt of :mod:`corl_bench.debate` with the other
family's answer, and prints the share of answered and of correct turns in both rounds (hf engine, temperature 1).
"""

from __future__ import annotations

import argparse
import itertools

from corl_bench.debate import debate_prompt
from corl_bench.grading.verifier import extract_normalized, is_equivalent
from corl_bench.micro.tasks import problem_stream
from corl_bench.micro.warmstart import render_prompt


def main() -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from corl_bench.micro.shipped import ROOT
    from corl_bench.registries import ENGINES
    from corl_bench.rollout import SamplingParams

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", type=int, default=24)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--families", nargs=2, default=["qwen2-bpe", "llama-bpe"])
    args = ap.parse_args()
    problems = list(itertools.islice(problem_stream(args.seed), args.problems))
    prompts = [render_prompt(p.text("original")) for p in problems]
    engines = {}
    for fam in args.families:
        path = ROOT / fam
        engines[fam] = ENGINES.get("hf")(AutoModelForCausalLM.from_pretrained(path).eval(),
                                         AutoTokenizer.from_pretrained(path))

    def score(texts: list[str]) -> str:
        answers = [extract_normalized(t) for t in texts]
        right = sum(a is not None and is_equivalent(a, p.answer) for a, p in zip(answers, problems))
        return f"answered {sum(a is not None for a in answers)}/{len(texts)}, correct {right}/{len(texts)}"

    params = SamplingParams(n=1, max_new_tokens=40, seed=args.seed)
    first = {f: [row[0].text for row in e.generate(prompts, params)] for f, e in engines.items()}
    a, b = args.families
    for me, other in ((a, b), (b, a)):
        asked = [debate_prompt(q, [o.strip()]) for q, o in zip(prompts, first[other])]
        second = [row[0].text for row in engines[me].generate(asked, params)]
        print(f"{me}: round 0 {score(first[me])}; round 1 (shown {other}'s answer) {score(second)}")


if __name__ == "__main__":
    main()
