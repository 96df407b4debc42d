"""Procedurally drawn images with integer / option-letter questions: the visual side of the micro profile.

Every scene is a 32 x 32 RGB image on white, divided into a 4 x 4 grid of 8 x 8-pixel cells, one cell per patch
of the tiny vision towers. Every object lies inside its cell, inset by 1 px (a 6 x 6 box), so no patch ever sees a
piece of a neighbour's object. Objects are drawn from fixed 6 x 6 pixel masks with ``ImageDraw.point`` in pure,
single-channel colours (no anti-aliasing): the bytes of an image are identical on every machine and Pillow version,
and a pixel is either white or exactly one colour.

==========  ====================================================  ===========================  ==================
kind        scene and question                                    worked solution              answer
==========  ====================================================  ===========================  ==================
``count``   2..8 shapes, 1..6 of the asked type:                  ``circles:3;\\boxed{3}``      integer
            "How many circles are there?"
``total``   two asked types (1..4 each), 0..n distractors:        ``circles:3,squares:2;``     integer
            "How many circles and squares are there together?"   ``3+2=5;\\boxed{5}``
``bars``    four bars A..D (grid columns), heights 1..4 cells     ``A2,B4,C1,D3;\\boxed{B}``    letter A-D
            from the bottom row up, one distinct tallest bar:
            "Which bar is the tallest? Choices: A, B, C, D"
``lengths`` two dashed horizontal lines in two rows, A upper and  ``A3,B2;\\boxed{A}``          letter A/B
            B lower, lengths 1..4 cells, different lengths:
            "Which line is longer? A: the upper line, B: ..."
==========  ====================================================  ===========================  ==================

* **Scene.** ``VisualProblem.scene`` is a sorted tuple of ``Obj(shape, row, col, colour)``; ``shape`` is one of
  ``SHAPES`` or ``"bar"`` (one cell of a bar: a full 6 x 6 block) or ``"line"`` (one cell of a line: 6 x 2 px,
  centred vertically). The answer is re-derivable from the scene alone (``reads``).
* **Difficulty** (``level``): count 1 + [count >= 4] + [>= 6 shapes]; total 2 + [a count >= 4]; bars 1, 2 when the
  two tallest differ by one cell, 3 when they also stand apart; lengths 1, 2 when they differ by one cell, 3 when they
  also start in different columns. ``tags`` holds the kind and ``last-column`` (a relevant object in the rightmost
  column), ``many`` (an asked count >= 4), ``close`` (the two compared heights/lengths differ by one) and
  ``triangles`` (a triangle among the shapes), so evaluation can report each family's error pocket.
* **Views.** ``original`` and ``rephrased`` word the same question differently; the id and the answer are shared.
* **Held out.** ``key()`` is (kind, asked types, scene): the same image with the same question. A 4 x 4 grid has
  few layouts (144 bar-height patterns, 420 line layouts), so a key without colours would hold out most of the bar
  charts; with colours, training streams skip about 2 % of bar and 5 % of line draws as held out (counts: none).
  Solutions are at most 37 characters (``triangles:4,squares:4;4+4=8;\\boxed{8}``).

Family flaws (``flawed_solution``): each model family's warm-start corpus misreads images in its own way; the rest
of the working continues from the wrong read-out, as ``families.flawed_solution`` does for arithmetic.

==============  ===========================  ====================================================================
flaw            meant for                    misreading
==============  ===========================  ====================================================================
``edge-blind``  a Qwen2-VL-style family      overlooks the rightmost grid column: counts miss objects there, bar D
                                             is read one cell shorter, a line loses its cell in the last column
``undercount``  a LLaVA-style family         counts of 4 or more are read one too low, bars and lines of 3 or more
                                             cells are read one cell too short
``shape-mix``   a third family               reads triangles as squares (counts of squares include the triangles,
                                             triangles count as none); bars and lines are read correctly
==============  ===========================  ====================================================================

Ties in a misread comparison go to the first letter (``A3,B3;\\boxed{A}``), so an error is systematic: the same
wrong answer every time. Measured on ``micro-visual-test`` (flaw always on, no noise), each flaw changes the answer
of 27-34 % of problems; edge-blind and undercount share 16 % (Jaccard 0.31, the same wrong answer on 7 %), and the
generator places asked shapes in the rightmost column independently of how many there are (``EDGE_SHARE``) so
that the two pockets overlap only by chance. Everything here is pure Python (+ Pillow for ``image``) and
deterministic given the seed.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Iterator, NamedTuple, Sequence

log = logging.getLogger(__name__)

IMAGE_SIZE = 32
GRID = 4
CELL = IMAGE_SIZE // GRID
INSET = 1
LAST_COL = GRID - 1

SHAPES = ("circle", "square", "triangle")
PLURAL = {"circle": "circles", "square": "squares", "triangle": "triangles"}
COLOURS = {"red": (255, 0, 0), "blue": (0, 0, 255), "green": (0, 160, 0)}
KINDS = ("count", "total", "bars", "lengths")
VIEWS = ("original", "rephrased")
LETTERS = "ABCD"
FLAWS = ("edge-blind", "undercount", "shape-mix")
EDGE_SHARE = 0.5  # count/total: share of scenes with an asked shape in the rightmost column
CLOSE_SHARE = 0.5  # lengths: share of line pairs drawn one cell apart (besides those that are so by chance)

#: Held-out suites: name -> (seed, size). Versioned by ``SUITE_VERSION``; change it when the generator changes.
SUITES = {"micro-visual-test": (20_001, 300), "micro-visual-dev": (20_002, 200)}
SUITE_VERSION = "1"

# 6 x 6 masks drawn inside the 1-px inset of a cell. Pixel counts: circle 24, square 36, triangle 20, bar 36, line 12;
# every pair of shape masks differs in at least 12 pixels.
_MASK_ROWS = {
    "circle": ("..##..", ".####.", "######", "######", ".####.", "..##.."),
    "square": ("######",) * 6,
    "triangle": ("......", "..##..", ".####.", ".####.", "######", "######"),
    "bar": ("######",) * 6,
    "line": ("......", "......", "######", "######", "......", "......"),
}
MASKS: dict[str, tuple[tuple[int, int], ...]] = {
    name: tuple((y, x) for y, row in enumerate(rows) for x, ch in enumerate(row) if ch == "#")
    for name, rows in _MASK_ROWS.items()
}


class Obj(NamedTuple):
    """One drawn object: ``shape`` in ``SHAPES`` or ``"bar"``/``"line"`` (one cell of a bar or a line)."""

    shape: str
    row: int
    col: int
    colour: str


def cell_box(row: int, col: int) -> tuple[int, int, int, int]:
    """(x0, y0, x1, y1), inclusive, of the inset box in which an object of cell (row, col) is drawn."""
    x0, y0 = col * CELL + INSET, row * CELL + INSET
    return x0, y0, x0 + CELL - 2 * INSET - 1, y0 + CELL - 2 * INSET - 1


@dataclass(frozen=True)
class VisualProblem:
    """One drawn scene and its question. ``answer`` is the hidden ground truth (a string, as in benchmark files)."""

    id: str
    kind: str
    scene: tuple[Obj, ...]
    asked: tuple[str, ...] = ()  # count: (shape,); total: (shape, shape); bars/lengths: ()
    tags: tuple[str, ...] = field(default=())

    # ------------------------------------------------------------------ ground truth
    def reads(self) -> tuple[int, ...]:
        """The correct read-outs, in solution order: counts of the asked types, bar heights A..D or line lengths."""
        return read_scene(self)

    @property
    def answer(self) -> str:
        return answer_from_reads(self.kind, self.reads())

    @property
    def level(self) -> int:
        r = self.reads()
        if self.kind == "count":
            return 1 + (r[0] >= 4) + (len(self.scene) >= 6)
        if self.kind == "total":
            return 2 + (max(r) >= 4)
        if "close" not in self.tags:
            return 1
        if self.kind == "bars":
            top = sorted(range(GRID), key=lambda i: -r[i])[:2]
            return 3 if abs(top[0] - top[1]) > 1 else 2
        starts = {min(o.col for o in self.scene if o.row == row) for row in _line_rows(self)}
        return 3 if len(starts) > 1 else 2

    def key(self) -> tuple:
        """What makes two problems the same problem: the same image with the same question."""
        return (self.kind, self.asked, self.scene)

    # ------------------------------------------------------------------ rendering
    def image(self) -> Any:
        """The scene as a 32 x 32 RGB ``PIL.Image.Image`` (drawn afresh on every call)."""
        from PIL import Image, ImageDraw

        img = Image.new("RGB", (IMAGE_SIZE, IMAGE_SIZE), (255, 255, 255))
        draw = ImageDraw.Draw(img)
        for o in self.scene:
            x0, y0, _, _ = cell_box(o.row, o.col)
            draw.point([(x0 + x, y0 + y) for y, x in MASKS[o.shape]], fill=COLOURS[o.colour])
        return img

    def text(self, view: str = "original") -> str:
        if view not in VIEWS:
            raise ValueError(f"unknown view {view!r}; use one of {VIEWS}")
        rephrased = view == "rephrased"
        if self.kind == "count":
            p = PLURAL[self.asked[0]]
            return f"Count the {p} in the picture. What is their number?" if rephrased else \
                f"How many {p} are there?"
        if self.kind == "total":
            a, b = (PLURAL[s] for s in self.asked)
            return f"Add the number of {b} to the number of {a}. What is the sum?" if rephrased else \
                f"How many {a} and {b} are there together?"
        if self.kind == "bars":
            return "The bars from left to right are A, B, C and D. Which one is highest?" if rephrased else \
                "Which bar is the tallest? Choices: A, B, C, D"
        return "A is the upper line and B is the lower line. Which of the two is longer?" if rephrased else \
            "Which line is longer? A: the upper line, B: the lower line"

    def solution(self) -> str:
        """The correct worked solution in the target format."""
        return format_solution(self, self.reads())


# ------------------------------------------------------------------------------------------------ reading
def _line_rows(p: VisualProblem) -> list[int]:
    return sorted({o.row for o in p.scene if o.shape == "line"})


def read_scene(p: VisualProblem, flaw: str | None = None) -> tuple[int, ...]:
    """Read-outs of ``p`` as a reader with ``flaw`` (``None``: correctly) sees them; see the module docstring."""
    if flaw is not None and flaw not in FLAWS:
        raise ValueError(f"unknown visual flaw {flaw!r}; use one of {FLAWS}")
    seen = [o for o in p.scene if not (flaw == "edge-blind" and o.col == LAST_COL)]
    if p.kind in ("count", "total"):
        if flaw == "shape-mix":
            seen = [o._replace(shape="square") if o.shape == "triangle" else o for o in seen]
        out = [sum(o.shape == s for o in seen) for s in p.asked]
        if flaw == "undercount":
            out = [n - 1 if n >= 4 else n for n in out]
        return tuple(out)
    if p.kind == "bars":
        out = [sum(o.shape == "bar" and o.col == c for o in p.scene) for c in range(GRID)]
        if flaw == "edge-blind":
            out[LAST_COL] = max(0, out[LAST_COL] - 1)
    elif p.kind == "lengths":
        out = [sum(o.row == r for o in seen) for r in _line_rows(p)]
    else:
        raise ValueError(f"unknown visual kind {p.kind!r}; use one of {KINDS}")
    if flaw == "undercount":
        out = [h - 1 if h >= 3 else h for h in out]
    return tuple(out)


def answer_from_reads(kind: str, reads: Sequence[int]) -> str:
    """The answer a reader writes from its read-outs; ties go to the first letter."""
    if kind == "count":
        return str(reads[0])
    if kind == "total":
        return str(sum(reads))
    return LETTERS[max(range(len(reads)), key=lambda i: (reads[i], -i))]


def format_solution(p: VisualProblem, reads: Sequence[int]) -> str:
    """``circles:3,squares:2;3+2=5;\\boxed{5}`` / ``A2,B4,C1,D3;\\boxed{B}``: read-outs first, then the answer
    derived from them (so a misread carries through to the box)."""
    ans = answer_from_reads(p.kind, reads)
    if p.kind == "count":
        return f"{PLURAL[p.asked[0]]}:{reads[0]};\\boxed{{{ans}}}"
    if p.kind == "total":
        (a, b), (na, nb) = p.asked, reads
        return f"{PLURAL[a]}:{na},{PLURAL[b]}:{nb};{na}+{nb}={ans};\\boxed{{{ans}}}"
    return ",".join(f"{LETTERS[i]}{h}" for i, h in enumerate(reads)) + f";\\boxed{{{ans}}}"


def flawed_solution(flaw: str, problem: VisualProblem, rng: random.Random, p_sys: float, p_noise: float) -> str:
    """The solution a family's warm-start corpus shows for ``problem``: correct, or (with probability ``p_sys``) read
    with ``flaw`` and worked on from the misread values; with probability ``p_noise`` one read-out is off by one.
    ``flaw="none"`` gives noise only. Always consumes four draws of ``rng``, whatever the problem and flaw, so a
    corpus's later problems do not depend on earlier misreadings."""
    if flaw != "none" and flaw not in FLAWS:
        raise ValueError(f"unknown visual flaw {flaw!r}; use one of {FLAWS} or 'none'")
    flaw_on, noisy, where, up = (rng.random() for _ in range(4))
    reads = list(read_scene(problem, flaw if flaw_on < p_sys and flaw != "none" else None))
    if noisy < p_noise:
        i = min(len(reads) - 1, int(where * len(reads)))
        cap = 16 if problem.kind in ("count", "total") else GRID
        reads[i] = min(cap, max(0, reads[i] + (1 if up < 0.5 else -1)))
    return format_solution(problem, reads)


# --------------------------------------------------------------------------------------------- generation
def _tags(kind: str, scene: tuple[Obj, ...], asked: tuple[str, ...], reads: tuple[int, ...]) -> tuple[str, ...]:
    tags = {kind}
    if kind in ("count", "total"):
        if any(o.col == LAST_COL and o.shape in asked for o in scene):
            tags.add("last-column")
        if max(reads) >= 4:
            tags.add("many")
        if any(o.shape == "triangle" for o in scene):
            tags.add("triangles")
    elif kind == "bars":
        top, second = sorted(reads, reverse=True)[:2]
        if reads[LAST_COL] == top:
            tags.add("last-column")
        if top - second == 1:
            tags.add("close")
    else:
        if any(o.col == LAST_COL for o in scene):
            tags.add("last-column")
        if abs(reads[0] - reads[1]) == 1:
            tags.add("close")
    return tuple(sorted(tags))


def _place(rng: random.Random, asked: list[str], others: list[str]) -> tuple[Obj, ...]:
    """Asked shapes, then distractors, in distinct cells. With probability ``EDGE_SHARE`` one or two asked shapes
    stand in the rightmost column, otherwise none does (distractors may): how often the edge-blind pocket is hit is
    then independent of how many shapes are asked about, so it overlaps the undercount pocket only by chance, and
    where both misread a count, missing two edge shapes gives another wrong answer than reading one too low."""
    asked = rng.sample(asked, len(asked))
    free = list(range(GRID * GRID))
    edge, inner = [c for c in free if c % GRID == LAST_COL], [c for c in free if c % GRID != LAST_COL]
    cells = rng.sample(edge, rng.randint(1, min(2, len(asked)))) if rng.random() < EDGE_SHARE else []
    cells += rng.sample([c for c in inner if c not in cells], len(asked) - len(cells))
    cells += rng.sample([c for c in free if c not in cells], len(others))
    return tuple(Obj(s, c // GRID, c % GRID, rng.choice(tuple(COLOURS))) for s, c in zip(asked + others, cells))


def _draw_scene(rng: random.Random, kind: str) -> tuple[tuple[Obj, ...], tuple[str, ...]]:
    if kind == "count":
        asked = rng.choice(SHAPES)
        k = rng.randint(1, 6)
        n = rng.randint(max(2, k + 1), 8)
        others = [s for s in SHAPES if s != asked]
        return _place(rng, [asked] * k, [rng.choice(others) for _ in range(n - k)]), (asked,)
    if kind == "total":
        a, b = rng.sample(SHAPES, 2)
        (third,) = (s for s in SHAPES if s not in (a, b))
        ka, kb = rng.randint(1, 4), rng.randint(1, 4)
        return _place(rng, [a] * ka + [b] * kb, [third] * rng.randint(0, 8 - ka - kb)), (a, b)
    if kind == "bars":
        top, h = rng.randrange(GRID), rng.choice((2, 3, 3, 4, 4, 4))  # few charts of height 2: only 4 patterns
        heights = [h if col == top else rng.randint(1, h - 1) for col in range(GRID)]
        scene = []
        for col, n in enumerate(heights):
            colour = rng.choice(tuple(COLOURS))
            scene += [Obj("bar", GRID - 1 - k, col, colour) for k in range(n)]
        return tuple(scene), ()
    if kind == "lengths":
        rows = sorted(rng.sample(range(GRID), 2))
        if rng.random() < CLOSE_SHARE:
            short = rng.randint(1, GRID - 1)
            lengths = rng.sample((short, short + 1), 2)
        else:
            lengths = rng.sample(range(1, GRID + 1), 2)
        scene = []
        for row, n in zip(rows, lengths):
            start, colour = rng.randint(0, GRID - n), rng.choice(tuple(COLOURS))
            scene += [Obj("line", row, start + k, colour) for k in range(n)]
        return tuple(scene), ()
    raise ValueError(f"unknown visual kind {kind!r}; use one of {KINDS}")


def random_visual_problem(rng: random.Random, pid: str, kind: str | None = None) -> VisualProblem:
    """Draw one problem of ``kind`` (default: a uniformly drawn kind)."""
    kind = kind if kind is not None else rng.choice(KINDS)
    scene, asked = _draw_scene(rng, kind)
    scene = tuple(sorted(scene))
    bare = VisualProblem(pid, kind, scene, asked)
    return VisualProblem(pid, kind, scene, asked, _tags(kind, scene, asked, bare.reads()))


@lru_cache(maxsize=None)
def visual_suite(name: str) -> tuple[VisualProblem, ...]:
    """A fixed held-out suite (see ``SUITES``): kinds in turn (balanced), unique keys, deterministic; disjoint by key
    from the suites listed before it."""
    if name not in SUITES:
        raise KeyError(f"unknown micro visual suite {name!r}; valid: {', '.join(SUITES)}")
    seed, size = SUITES[name]
    rng = random.Random(seed)
    out: list[VisualProblem] = []
    earlier = list(SUITES)[:list(SUITES).index(name)]
    seen: set[tuple] = {p.key() for other in earlier for p in visual_suite(other)}  # suites are disjoint too
    while len(out) < size:
        p = random_visual_problem(rng, f"{name}-{len(out):04d}", KINDS[len(out) % len(KINDS)])
        if p.key() not in seen:
            seen.add(p.key())
            out.append(p)
    log.debug("built visual suite %s (version %s): %d problems", name, SUITE_VERSION, len(out))
    return tuple(out)


@lru_cache(maxsize=1)
def held_out_keys() -> frozenset[tuple]:
    return frozenset(p.key() for name in SUITES for p in visual_suite(name))


def visual_stream(seed: int, prefix: str = "train") -> Iterator[VisualProblem]:
    """Unlimited seeded stream of training problems (kinds uniformly mixed), disjoint by ``key`` from every suite."""
    rng = random.Random(seed)
    held = held_out_keys()
    i = 0
    while True:
        p = random_visual_problem(rng, f"{prefix}-{seed}-{i:07d}")
        i += 1
        if p.key() not in held:
            yield p
