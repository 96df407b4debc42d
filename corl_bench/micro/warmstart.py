"""Warm start: a short supervised phase that turns a random tiny LM into an imperfect arithmetic solver.

The corpus is the family's own flawed solutions (see ``families.flawed_solution``) of problems from a
family-specific stream; loss on solution tokens only; AdamW with warmup and cosine decay over a step cap. Training
stops as soon as greedy accuracy on a small dev stream (disjoint from every test suite) reaches the family's target,
checked every few dozen steps: the arithmetic is learnt in a sharp, seed-dependent transition, and a fixed step
count lands some families far above and others far below the intended imperfect base accuracy.
Everything is seeded and runs single-threaded per family, so a rebuilt checkpoint is bit-identical on the same
machine and torch build. Checkpoints are ordinary ``save_pretrained`` folders (model + tokenizer), so the loading
code that serves them also serves real models.
"""

from __future__ import annotations

import itertools
import json
import math
import logging
import random
import time
from pathlib import Path
from typing import Any, Callable

from corl_bench.micro.families import Family, build_model, build_tokenizer, flawed_solution
from corl_bench.micro.tasks import problem_stream

log = logging.getLogger(__name__)

PROMPT_SUFFIX = "\n"


def cosine_factor(step: int, steps: int, warmup: float = 0.05) -> float:
    """Linear warmup, then cosine decay to 10 % at ``steps`` (the cap; training usually stops earlier)."""
    w = max(1, int(warmup * steps))
    if step < w:
        return (step + 1) / w
    return 0.1 + 0.45 * (1 + math.cos(math.pi * min(1.0, (step - w) / max(1, steps - w))))


def _dev_set(family: Family, n: int = 96) -> list[Any]:
    """Problems for the stopping check: the family's own seeded stream, disjoint from every test suite."""
    return list(itertools.islice(problem_stream(family.seed + 7_777, prefix=f"warm-dev-{family.name}"), n))


def dev_accuracy(model: Any, tok: Any, problems: list[Any], max_new_tokens: int = 40) -> float:
    """Greedy accuracy on ``problems`` (original view), graded by the project's verifier."""
    import torch

    from corl_bench.grading.verifier import grade

    model.eval()
    enc = tok([render_prompt(p.text("original")) for p in problems], return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tok.pad_token_id,
                             eos_token_id=tok.eos_token_id)
    texts = tok.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    return sum(grade(t, p.answer)[1] for t, p in zip(texts, problems)) / len(problems)


def render_prompt(text: str) -> str:
    """The micro prompt format: the problem text and a newline; the tokenizer adds ``<bos>``."""
    return text + PROMPT_SUFFIX


def _examples(family: Family, n: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    out = []
    for p in itertools.islice(problem_stream(seed, prefix=f"warm-{family.name}"), n):
        view = "rephrased" if rng.random() < family.rephrased_share else "original"
        out.append((render_prompt(p.text(view)), flawed_solution(family, p, rng)))
    return out


def right_padded(rows: list[tuple[list[int], list[int]]], pad: int) -> tuple[Any, Any, Any]:
    """(prompt ids, target ids) rows -> right-padded ``input_ids``, ``attention_mask`` and ``labels`` (-100 outside
    the targets), all (B, L): a supervised batch whose loss covers the targets only."""
    import torch

    width = max(len(a) + len(b) for a, b in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    att = torch.zeros((len(rows), width), dtype=torch.long)
    for r, (a, b) in enumerate(rows):
        seq = a + b
        ids[r, : len(seq)] = torch.tensor(seq)
        labels[r, len(a): len(seq)] = torch.tensor(b)
        att[r, : len(seq)] = 1
    return ids, att, labels


def supervised_loop(family: Any, model: Any, steps: int, batch: Callable[[int], dict[str, Any]],
                    dev_accuracy_now: Callable[[], float], progress: Callable[[int, int, Any], None] | None = None
                    ) -> tuple[int, list[tuple[int, float]], list[float], float]:
    """The warm start's optimisation, shared by text and vision-language families: AdamW with warmup and cosine decay
    over ``steps`` (the cap), ``model(**batch(step)).loss`` per step, gradient clipping at 1, and a greedy dev check
    (``dev_accuracy_now``) every ``warmstart_check_every`` steps from ``warmstart_min_steps`` on that stops training
    once it reaches ``warmstart_target``. Returns (steps done, dev checks, losses, seconds)."""
    import torch

    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=family.warmstart_lr, betas=(0.9, 0.98), weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: cosine_factor(s, steps))
    t0, losses, checks, done = time.perf_counter(), [], [], 0
    for step in range(steps):
        loss = model(**batch(step)).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        done = step + 1
        if done >= family.warmstart_min_steps and done % family.warmstart_check_every == 0:
            checks.append((done, dev_accuracy_now()))
            model.train()
            if checks[-1][1] >= family.warmstart_target:
                break
        if progress is not None:
            progress(done, steps, model)
    if progress is not None:
        progress(steps, steps, model)
    model.eval()
    return done, checks, losses, time.perf_counter() - t0


def warm_start(family: Family, *, steps: int | None = None, progress: Callable[[int, int, Any], None] | None = None,
               threads: int = 1) -> tuple[Any, Any, dict]:
    """Build tokenizer and model for ``family`` and train them; returns (model, tokenizer, record)."""
    import torch

    torch.set_num_threads(threads)
    steps = family.warmstart_steps if steps is None else steps  # the cap; training stops at the target accuracy
    bs = family.warmstart_batch
    dev = _dev_set(family)
    data = _examples(family, steps * bs, seed=family.seed)
    tok = build_tokenizer(family.tokenizer, [p + s for p, s in data[:4000]], vocab_size=family.vocab_size or 800)
    torch.manual_seed(family.seed)
    model = build_model(family, tok)
    eos = tok.eos_token_id
    enc_p = tok([p for p, _ in data], add_special_tokens=True)["input_ids"]
    enc_s = tok([s for _, s in data], add_special_tokens=False)["input_ids"]

    def batch(step: int) -> dict[str, Any]:
        ids, att, labels = right_padded([(enc_p[i], enc_s[i] + [eos]) for i in range(step * bs, (step + 1) * bs)],
                                        tok.pad_token_id)
        return {"input_ids": ids, "attention_mask": att, "labels": labels}

    done, checks, losses, seconds = supervised_loop(family, model, steps, batch, lambda: dev_accuracy(model, tok, dev),
                                                    progress)
    record = {"family": family.name, "steps": done, "max_steps": steps, "target_dev_greedy": family.warmstart_target,
              "dev_checks": checks, "batch": bs, "lr": family.warmstart_lr, "seed": family.seed,
              "final_loss": sum(losses[-20:]) / min(20, len(losses)), "seconds": seconds,
              "n_params": sum(p.numel() for p in model.parameters())}
    return model, tok, record


def save_checkpoint(model: Any, tok: Any, record: dict, path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    (path / "warmstart.json").write_text(json.dumps(record, indent=2))
