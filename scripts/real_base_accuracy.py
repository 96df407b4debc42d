"""Greedy base accuracy of the real models on candidate training sets: is there a set with signal on this CPU?

    python scripts/real_base_accuracy.py --data-dir ../shared/data [--models smol,gemma3-270m] [--n 40]

Candidate sets (``--n`` items each, drawn with a fixed seed): ``arith1`` (single-digit +, -, x; generated),
``gsm8k-train`` (GSM8K train) and ``math-l12`` (MATH train, levels 1-2). Prompts per model:

* ``chat-boxed``: the paper's training prompt, ``"{problem}\\n Please reason step by step, and put your final answer
  within \\boxed{}."``, in the model's chat template (as the hf profile renders it; a model without one gets it plain);
* ``chat-plain``: the bare problem in the chat template (the answer format the model uses by itself);
* ``3-shot``: three worked examples in the set's own step pattern, each ending "The answer is N.", then
  ``Question: ... Answer:`` (for base models; generation stops at the next "Question:").

Grading: ``reward`` is the training reward's extractor (the Qwen chain: last ``\\boxed{}``, then "the answer is",
then the last number; :func:`corl_bench.grading.verifier.extract_normalized`) with the math grader; ``flexible`` is
the last number (lm-eval GSM8K flexible-extract). Greedy, ``--max-new-tokens`` (64) per completion. Writes
``<out>/base_accuracy.json`` (every completion), ``<out>/base_accuracy.md`` (the table) and the candidate sets as
``<out>/sets/<name>.jsonl`` (``data.train=<that file>`` trains on one). Run once, by hand: it is not part of the
test suite. On a shared, busy machine pass ``--threads 1`` (two OpenMP threads on two contended cores spin-wait).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHOTS = {
    "arith1": [("What is 3 + 4?", "3 + 4 = 7. The answer is 7."),
               ("What is 9 - 5?", "9 - 5 = 4. The answer is 4."),
               ("What is 6 x 2?", "6 x 2 = 12. The answer is 12.")],
    "gsm8k-train": [("Tom has 5 apples. He buys 3 more and then eats 2. How many apples does he have now?",
                     "Tom has 5 + 3 = 8 apples after buying. After eating 2 he has 8 - 2 = 6. The answer is 6."),
                    ("A pen costs $2. How much do 4 pens cost?", "4 pens cost 4 x 2 = 8 dollars. The answer is 8."),
                    ("Sara read 12 pages on Monday and twice as many on Tuesday. How many pages did she read in "
                     "total?", "On Tuesday she read 2 x 12 = 24 pages. In total 12 + 24 = 36. The answer is 36.")],
    "math-l12": [("Compute $3^2 + 4$.", "$3^2 = 9$, and $9 + 4 = 13$. The answer is 13."),
                 ("What is the value of $x$ if $2x + 1 = 7$?", "$2x = 6$, so $x = 3$. The answer is 3."),
                 ("Simplify $\\frac{6}{8}$.", "Divide by 2: $\\frac{6}{8} = \\frac{3}{4}$. The answer is "
                                              "\\frac{3}{4}.")],
}
INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."


def candidate_sets(data_dir: Path, n: int, seed: int = 0) -> dict[str, list[tuple[str, str, str]]]:
    """name -> [(id, problem, answer)]."""
    rng = random.Random(seed)
    arith = []
    for i in range(n):
        a, b, op = rng.randint(1, 9), rng.randint(1, 9), rng.choice("+-x")
        if op == "-" and b > a:
            a, b = b, a
        ans = a + b if op == "+" else a - b if op == "-" else a * b
        arith.append((f"arith1-{i}", f"What is {a} {op} {b}?", str(ans)))
    out = {"arith1": arith}

    def read(rel: str) -> list[dict]:
        path = data_dir / rel
        if not path.is_file():
            raise SystemExit(f"{path} not found; pass --data-dir with the offline data copies (../shared/data)")
        return [json.loads(x) for x in path.read_text(encoding="utf-8").split("\n") if x.strip()]

    gsm = read("gsm8k/train.jsonl")
    out["gsm8k-train"] = [(r["id"], r["problem"], r["answer"]) for r in random.Random(seed).sample(gsm, n)]
    math = [r for r in read("math_train/train.jsonl") if r.get("level") in ("Level 1", "Level 2")]
    out["math-l12"] = [(r["id"], r["problem"], r["answer"]) for r in random.Random(seed).sample(math, n)]
    return out


def prompts_for(variant: str, set_name: str, problem: str, tok) -> tuple[str, tuple[str, ...]]:
    from corl_bench.hf.profile import chat_prompt

    if variant == "chat-boxed":
        return chat_prompt(tok, f"{problem}\n {INSTRUCTION}"), ()
    if variant == "chat-plain":
        return chat_prompt(tok, problem), ()
    shots = "".join(f"Question: {q}\nAnswer: {a}\n\n" for q, a in SHOTS[set_name])
    return f"{shots}Question: {problem}\nAnswer:", ("Question:",)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--models", default="smol,gemma3-270m")
    ap.add_argument("--variants", default="chat-boxed,chat-plain,3-shot")
    ap.add_argument("--sets", default="arith1,gsm8k-train,math-l12")
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "results" / "real-base-accuracy"))
    args = ap.parse_args()

    import torch

    from corl_bench.models.load import load_model
    from corl_bench.eval.scoring import grade_text
    from corl_bench.grading.verifier import extract_normalized, is_correct
    from corl_bench.rollout import SamplingParams, make_engine

    torch.set_num_threads(args.threads)
    sets = candidate_sets(Path(args.data_dir), args.n)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from corl_bench.hf.data import write_jsonl

    for name, items in sets.items():  # usable as data.train=<out>/sets/<name>.jsonl
        write_jsonl(out / "sets" / f"{name}.jsonl", [{"id": i, "problem": p, "answer": a} for i, p, a in items])
    results, rows = [], []
    for ref in args.models.split(","):
        model, tok = load_model(ref)
        engine = make_engine("fast", model, tok)
        for variant in args.variants.split(","):
            for set_name in args.sets.split(","):
                items = sets[set_name]
                built = [prompts_for(variant, set_name, p, tok) for _, p, _ in items]
                params = SamplingParams(n=1, greedy=True, max_new_tokens=args.max_new_tokens, logprobs=False,
                                        stop=built[0][1])
                t = time.perf_counter()
                comps = engine.generate([b[0] for b in built], params)
                secs = time.perf_counter() - t
                n_tok = sum(len(c[0].token_ids) for c in comps)
                reward = flex = boxed = 0
                for (iid, problem, gold), (prompt, _), c in zip(items, built, comps):
                    text = c[0].text
                    pred = extract_normalized(text)
                    ok = is_correct(pred, gold)
                    fx, fok = grade_text(text, gold, "flexible", "math")
                    reward, flex, boxed = reward + ok, flex + fok, boxed + ("\\boxed" in text)
                    rows.append({"model": ref, "variant": variant, "set": set_name, "id": iid, "gold": gold,
                                 "prompt": prompt, "completion": text, "reward_answer": pred, "reward_correct": ok,
                                 "flexible_answer": fx, "flexible_correct": fok})
                res = {"model": ref, "variant": variant, "set": set_name, "n": len(items),
                       "reward_acc": reward / len(items), "flexible_acc": flex / len(items),
                       "boxed_rate": boxed / len(items), "tokens": n_tok, "seconds": round(secs, 1),
                       "tok_per_s": round(n_tok / secs, 1)}
                results.append(res)
                print(json.dumps(res), flush=True)
        del model, engine
    (out / "base_accuracy.json").write_text(json.dumps({"settings": vars(args), "results": results, "rows": rows},
                                                       indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    lines = ["| model | prompt | set | n | reward-extractor acc % | last-number acc % | writes \\boxed % | tok/s |",
             "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['model']} | {r['variant']} | {r['set']} | {r['n']} | {100 * r['reward_acc']:.1f} | "
              f"{100 * r['flexible_acc']:.1f} | {100 * r['boxed_rate']:.0f} | {r['tok_per_s']} |" for r in results]
    (out / "base_accuracy.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
