"""Generated arithmetic for the real-model study: a training set and two benchmark suites with no data files.

The real study (``sweeps/real-study.yaml``, ``results/real-study.md``) trains the two installable models on the one
kind of problem they answer above the floor on a CPU: "What is a op b?" with small operands. The training form of
``arith-1digit`` (operands 1-9) has only 207 distinct problems, too few to hold out a test set of the same form that
resolves a 5-point difference, so the study uses a wider universe of the same wording:

    ``arith-small``   "What is a + b?" and "What is a - b?" with operands 1-20 (never negative),
                      "What is a x b?" with operands 1-12 (the times table): 400 + 210 + 144 = 754 problems

split once, by a hash of each problem's text, into a training part (``data.train=arith-small``, the problems walked in
seeded epochs) and a held-out part (55 %: the benchmark ``arith-heldout``; disjoint by construction, and the run's
decontamination check confirms it: it drops nothing). The transfer suite ``arith-transfer`` asks problems in the
same wording with two-digit operands ("What is 47 + 85?", "What is 63 - 29?": operands 21-99), sizes no
training problem has. Both models answer it near the floor before training (greedy, 100 problems: SmolLM2 bare 6 %,
Gemma-3 few-shot 9 %): a transfer set that shows gains, not losses.

Qwen2.5-Coder-0.5B saturates both (99 % and 96 % greedy), so the Qwen setting (issue 40) has a harder universe:

    ``arith-mul``     "What is a x b?" with a = 12-99 and b = 11-19: 88 x 9 = 792 problems

split by a hash of each problem's text into a held-out part (50 %: the benchmark ``arith-mul-heldout``), a dev part
(10 %: ``arith-mul-dev``, for choosing settings, never a test) and a training part (40 %: ``data.train=arith-mul``).
Its operand ranges were chosen by Qwen2.5-Coder-0.5B's greedy accuracy asked bare in its chat template
(``scripts/arith_calibration.py``): 46 % on 80 problems of the form, where "a x b" with b = 3-19 gave 70 %. The
answer is one short sentence ("27 x 15 equals 405."), so 32 new tokens hold it.

Everything is a pure function of the code: the same rows and items on every machine (no RNG state, no files).
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

from corl_bench.eval.items import Item

HELDOUT_FRACTION = 0.55
"""The share of the ``arith-small`` universe held out for ``arith-heldout`` (decided by each problem's hash)."""
SPLIT_SALT = "corl-bench:arith-small:v1"


def small_universe() -> list[tuple[str, str]]:
    """Every problem of the ``arith-small`` form as ``(text, answer)``, in a fixed order (+, -, x; then operands)."""
    out = [(f"What is {a} + {b}?", str(a + b)) for a in range(1, 21) for b in range(1, 21)]
    out += [(f"What is {a} - {b}?", str(a - b)) for a in range(1, 21) for b in range(1, a + 1)]
    out += [(f"What is {a} x {b}?", str(a * b)) for a in range(1, 13) for b in range(1, 13)]
    return out


def _hash64(salt: str, text: str) -> int:
    """A problem's 64-bit split hash: stable, machine-free."""
    return int.from_bytes(hashlib.sha256(f"{salt}:{text}".encode()).digest()[:8], "big")


def is_heldout(text: str) -> bool:
    """Whether a problem of the universe belongs to the held-out part (a hash of its text: stable, machine-free)."""
    return _hash64(SPLIT_SALT, text) < HELDOUT_FRACTION * 2 ** 64


MUL_SALT = "corl-bench:arith-mul:v1"
MUL_PARTS = (("heldout", 0.5), ("dev", 0.6), ("train", 1.0))
"""The ``arith-mul`` split: a problem's hash (in [0, 1)) below 0.5 is held out, below 0.6 dev, else training."""


def mul_universe() -> list[tuple[str, str]]:
    """Every problem of the ``arith-mul`` form as ``(text, answer)``: "What is a x b?", a = 12-99, b = 11-19."""
    return [(f"What is {a} x {b}?", str(a * b)) for a in range(12, 100) for b in range(11, 20)]


def mul_part(text: str) -> str:
    """The part of the ``arith-mul`` split a problem belongs to: ``heldout``, ``dev`` or ``train`` (its hash)."""
    h = _hash64(MUL_SALT, text)
    return next(name for name, below in MUL_PARTS if h < below * 2 ** 64)


def mul_rows(part: str) -> list[tuple[str, str, str]]:
    """One part of the ``arith-mul`` split as ``(id, text, answer)``; ids number the whole universe."""
    if part not in {name for name, _ in MUL_PARTS}:
        raise ValueError(f"arith-mul has parts heldout, dev and train; got {part!r}")
    prefix = "arith-mul" if part == "train" else f"arith-mul-{part}"
    return [(f"{prefix}-{i}", p, a) for i, (p, a) in enumerate(mul_universe()) if mul_part(p) == part]


def mul_train_rows() -> list[dict[str, Any]]:
    """``data.train=arith-mul``: the training part of the ``arith-mul`` split, one row per distinct problem."""
    return [{"id": i, "problem": p, "answer": a} for i, p, a in mul_rows("train")]


def train_rows() -> list[dict[str, Any]]:
    """``data.train=arith-small``: the training part, one row per distinct problem (the stream shuffles epochs)."""
    return [{"id": f"arith-small-{i}", "problem": p, "answer": a}
            for i, (p, a) in enumerate(small_universe()) if not is_heldout(p)]


def heldout_rows() -> list[tuple[str, str, str]]:
    """The ``arith-heldout`` items as ``(id, text, answer)``: every held-out problem of the universe."""
    return [(f"arith-heldout-{i}", p, a) for i, (p, a) in enumerate(small_universe()) if is_heldout(p)]


def transfer_rows(size: int, seed: int) -> list[tuple[str, str, str]]:
    """``arith-transfer``: ``size`` distinct two-digit problems "What is a + b?" / "What is a - b?" (operands 21-99,
    never negative: no operand the training universe has), drawn with ``seed`` from the 9,401 problems of that
    form."""
    universe = [(f"What is {a} + {b}?", str(a + b)) for a in range(21, 100) for b in range(21, 100)]
    universe += [(f"What is {a} - {b}?", str(a - b)) for a in range(21, 100) for b in range(21, a + 1)]
    if size > len(universe):
        raise ValueError(f"arith-transfer has {len(universe)} distinct problems; size {size} is too many")
    picked = random.Random(f"arith-transfer:{seed}").sample(universe, size)
    return [(f"arith-transfer-{i}", p, a) for i, (p, a) in enumerate(picked)]


class ArithItem(Item):
    """A generated benchmark item (the spec's template renders ``problem``) that a profile can also render as a
    training problem (:meth:`text`), for a spec whose agents are asked as they are trained (``ask_as_trained``)."""

    def text(self, view: str = "original") -> str:
        return self.problem


SUITES = ("arith-heldout", "arith-transfer", "arith-mul-heldout", "arith-mul-dev")


def suite_items(suite: str, size: int | None = None, seed: int | None = None) -> list[ArithItem]:
    """The items of a generated suite (``source.suite`` of a spec whose generator is this module)."""
    if suite == "arith-heldout":
        rows = heldout_rows()
    elif suite == "arith-transfer":
        rows = transfer_rows(size or 400, seed or 0)
    elif suite in ("arith-mul-heldout", "arith-mul-dev"):
        rows = mul_rows(suite.rsplit("-", 1)[1])
    else:
        raise ValueError(f"{suite!r} is not a suite of corl_bench.hf.arith; valid: {', '.join(SUITES)}")
    return [ArithItem(i, p, a) for i, p, a in rows]
