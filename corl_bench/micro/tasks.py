"""Procedurally generated math word problems: the data side of the micro profile.

Every problem is a short story with integer answer, e.g.::

    original : "Uma has 40 apples. She finds 9 and sells 3. How many apples now?"
    rephrased: "Uma sold 3 apples after finding 9. She began with 40. How many apples now?"
    solution : "40+9=49;-3=46;\\boxed{46}"

* **Arithmetic.** A start value in 10..89 and two or three steps of +d / -d with d in 2..9; every intermediate value
  stays in 0..99. Single-digit operands keep the arithmetic learnable by sub-million-parameter models in a minute
  (the micro pilot found two-digit operands unlearnable in the time budget).
* **Difficulty** is graded by what a step asks for: level 1 = two steps without carry or borrow, level 2 = two steps
  with a carry or borrow, level 3 = three steps. ``Problem.tags`` records ``carry``, ``borrow`` and ``three-step`` so
  evaluation can report each family's error pocket.
* **Views.** ``original`` and ``rephrased`` word the same problem differently (the rephrased view reorders the story
  and states the start value last); the answer and the problem id are the same, so two agents can be aligned by id.
* **Streams.** ``problem_stream(seed)`` is an unlimited, seeded stream of training problems; ``test_suite(name)``
  returns a fixed held-out suite. Training streams exclude every arithmetic chain that occurs in a test suite, so
  the suites stay held out.

Everything here is pure Python and deterministic given the seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Iterator

NAMES = ("Uma", "Ben", "Ava", "Raj", "Lia", "Tom", "Mei", "Sam", "Ivy", "Leo", "Zoe", "Kai")
ITEMS = ("apples", "coins", "books", "shells", "stamps", "pens", "cards", "eggs", "beads", "nuts")
ADD_VERBS = (("finds", "finding", "found"), ("buys", "buying", "bought"), ("gets", "getting", "got"),
             ("wins", "winning", "won"))
SUB_VERBS = (("loses", "losing", "lost"), ("sells", "selling", "sold"), ("gives away", "giving away", "gave away"),
             ("eats", "eating", "ate"))
VIEWS = ("original", "rephrased")

#: Held-out suites: name -> (seed, size). Versioned by ``SUITE_VERSION``; change it when the generator changes.
SUITES = {"micro-test": (10_001, 300), "micro-dev": (10_002, 200)}
SUITE_VERSION = "1"


@dataclass(frozen=True)
class Step:
    op: str  # "+" or "-"
    operand: int
    verb: int  # index into ADD_VERBS / SUB_VERBS


@dataclass(frozen=True)
class Problem:
    """One word problem with both views. ``answer`` is the hidden ground truth (a string, as in benchmark files)."""

    id: str
    start: int
    steps: tuple[Step, ...]
    name: str
    item: str
    tags: tuple[str, ...] = field(default=())

    @property
    def answer(self) -> str:
        return str(self.values()[-1])

    @property
    def level(self) -> int:
        if len(self.steps) == 3:
            return 3
        return 2 if ("carry" in self.tags or "borrow" in self.tags) else 1

    def values(self) -> list[int]:
        vals = [self.start]
        for s in self.steps:
            vals.append(vals[-1] + s.operand if s.op == "+" else vals[-1] - s.operand)
        return vals

    def chain(self) -> tuple[int, ...]:
        """The arithmetic skeleton (start, signed operands): what makes two problems the same problem."""
        return (self.start,) + tuple(s.operand if s.op == "+" else -s.operand for s in self.steps)

    def text(self, view: str = "original") -> str:
        if view == "original":
            return _original_text(self)
        if view == "rephrased":
            return _rephrased_text(self)
        raise ValueError(f"unknown view {view!r}; use one of {VIEWS}")

    def solution(self) -> str:
        """The correct worked solution in the target format."""
        return format_solution(self.start, [(s.op, s.operand) for s in self.steps])


def format_solution(start: int, steps: list[tuple[str, int]], values: list[int] | None = None) -> str:
    """``40+9=49;-3=46;\\boxed{46}``: the first step restates the start value, later steps continue from the
    previous result. ``values`` overrides the computed results (used to write flawed solutions)."""
    if values is None:
        values = [start]
        for op, d in steps:
            values.append(values[-1] + d if op == "+" else values[-1] - d)
    parts = [f"{op}{d}={values[i + 1]}" for i, (op, d) in enumerate(steps)]
    return str(start) + ";".join(parts) + ";\\boxed{" + str(values[-1]) + "}"


def _verb(step: Step, form: int) -> str:
    return (ADD_VERBS if step.op == "+" else SUB_VERBS)[step.verb][form]


def _original_text(p: Problem) -> str:
    acts = [f"{_verb(s, 0)} {s.operand}" for s in p.steps]
    story = ", ".join(acts[:-1]) + " and " + acts[-1]
    return f"{p.name} has {p.start} {p.item}. {p.name} {story}. How many {p.item} now?"


def _rephrased_text(p: Problem) -> str:
    last, earlier = p.steps[-1], p.steps[:-1]
    before = " and ".join(f"{_verb(s, 1)} {s.operand}" for s in earlier)
    return (f"{p.name} {_verb(last, 2)} {last.operand} {p.item} after {before}. "
            f"At first there were {p.start}. How many {p.item} now?")


def _tags(start: int, steps: tuple[Step, ...]) -> tuple[str, ...]:
    tags, v = [], start
    for s in steps:
        if s.op == "+" and (v % 10) + s.operand >= 10:
            tags.append("carry")
        if s.op == "-" and (v % 10) < s.operand:
            tags.append("borrow")
        v = v + s.operand if s.op == "+" else v - s.operand
    if len(steps) == 3:
        tags.append("three-step")
    return tuple(sorted(set(tags)))


def random_problem(rng: random.Random, pid: str, n_steps: int | None = None) -> Problem:
    """Draw one problem; intermediate values stay in 0..99."""
    n = n_steps if n_steps is not None else rng.choice((2, 3))
    while True:
        start = rng.randint(10, 89)
        steps, v, ok = [], start, True
        for _ in range(n):
            op = rng.choice("+-")
            d = rng.randint(2, 9)
            v = v + d if op == "+" else v - d
            if not 0 <= v <= 99:
                ok = False
                break
            steps.append(Step(op, d, rng.randrange(4)))
        if ok:
            st = tuple(steps)
            return Problem(pid, start, st, rng.choice(NAMES), rng.choice(ITEMS), _tags(start, st))


@lru_cache(maxsize=None)
def test_suite(name: str) -> tuple[Problem, ...]:
    """A fixed held-out suite (see ``SUITES``); deterministic across machines and Python versions."""
    if name not in SUITES:
        raise KeyError(f"unknown micro suite {name!r}; valid: {', '.join(SUITES)}")
    seed, size = SUITES[name]
    rng = random.Random(seed)
    out, seen = [], set()
    while len(out) < size:
        p = random_problem(rng, f"{name}-{len(out):04d}")
        if p.chain() not in seen:
            seen.add(p.chain())
            out.append(p)
    return tuple(out)


@lru_cache(maxsize=1)
def held_out_chains() -> frozenset[tuple[int, ...]]:
    return frozenset(p.chain() for name in SUITES for p in test_suite(name))


def problem_stream(seed: int, prefix: str = "train") -> Iterator[Problem]:
    """Unlimited seeded stream of training problems, disjoint (by arithmetic chain) from every test suite."""
    rng = random.Random(seed)
    held = held_out_chains()
    i = 0
    while True:
        p = random_problem(rng, f"{prefix}-{seed}-{i:07d}")
        i += 1
        if p.chain() not in held:
            yield p
