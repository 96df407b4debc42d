"""Tests for the micro profile's procedurally drawn visual problems (``corl_bench.micro.visual``). No torch.

The scene is re-read from the image pixels (each cell's non-white pixels against the shape masks) and the answers
are re-derived from the scene here, independently of the module's own ``read_scene``.
"""

from __future__ import annotations

import itertools
import random
import re
from collections import Counter

import numpy as np
import pytest

from corl_bench.micro import visual as V
from corl_bench.micro.visual import Obj, VisualProblem, flawed_solution, visual_stream

WHITE = (255, 255, 255)
N_STREAM = 2000
MAX_SOLUTION_CHARS = 40  # longest possible: "triangles:4,squares:4;4+4=8;\boxed{8}" (37)
SOLUTION_RE = {
    "count": re.compile(r"^(circles|squares|triangles):(\d+);\\boxed\{(\d+)\}$"),
    "total": re.compile(r"^(circles|squares|triangles):(\d+),(circles|squares|triangles):(\d+);"
                        r"(\d+)\+(\d+)=(\d+);\\boxed\{(\d+)\}$"),
    "bars": re.compile(r"^A(\d),B(\d),C(\d),D(\d);\\boxed\{([A-D])\}$"),
    "lengths": re.compile(r"^A(\d),B(\d);\\boxed\{([AB])\}$"),
}


def _suite(name: str = "micro-visual-test") -> tuple[VisualProblem, ...]:
    return V.visual_suite(name)


def _stream(seed: int, n: int = N_STREAM) -> list[VisualProblem]:
    return list(itertools.islice(visual_stream(seed), n))


def _pixels(p: VisualProblem) -> np.ndarray:
    return np.asarray(p.image(), dtype=np.uint8)


def _scene_from_pixels(px: np.ndarray) -> tuple[Obj, ...]:
    """Classify every cell by the exact mask and colour of its non-white pixels."""
    masks = {name: frozenset(m) for name, m in V.MASKS.items()}
    colours = {rgb: name for name, rgb in V.COLOURS.items()}
    found = []
    for row, col in itertools.product(range(V.GRID), range(V.GRID)):
        x0, y0, _, _ = V.cell_box(row, col)
        box = px[y0:y0 + 6, x0:x0 + 6]
        ink = frozenset((y, x) for y in range(6) for x in range(6) if tuple(box[y, x]) != WHITE)
        if not ink:
            continue
        rgbs = {tuple(int(c) for c in box[y, x]) for y, x in ink}
        assert len(rgbs) == 1 and next(iter(rgbs)) in colours, (row, col, rgbs)
        names = sorted(n for n, m in masks.items() if m == ink)
        assert names, f"cell {(row, col)} matches no mask"
        found.append((names, row, col, colours[next(iter(rgbs))]))
    return tuple(found)


def _expected_answer(p: VisualProblem) -> str:
    """The answer re-derived from the scene, independently of ``read_scene``."""
    if p.kind == "count":
        return str(sum(o.shape == p.asked[0] for o in p.scene))
    if p.kind == "total":
        return str(sum(o.shape in p.asked for o in p.scene))
    if p.kind == "bars":
        heights = [sum(o.col == c for o in p.scene) for c in range(4)]
        return "ABCD"[heights.index(max(heights))]
    rows = sorted({o.row for o in p.scene})
    la, lb = (sum(o.row == r for o in p.scene) for r in rows)
    return "A" if la > lb else "B"


def _flawed_answer(flaw: str, p: VisualProblem) -> str:
    sol = flawed_solution(flaw, p, random.Random(0), p_sys=1.0, p_noise=0.0)
    return re.search(r"\\boxed\{(.+)\}$", sol).group(1)


def _pockets(problems) -> dict[str, set[str]]:
    return {f: {p.id for p in problems if _flawed_answer(f, p) != p.answer} for f in V.FLAWS}


def _hand(kind: str, objs: list[tuple[str, int, int]], asked: tuple[str, ...] = ()) -> VisualProblem:
    scene = tuple(sorted(Obj(s, r, c, "red") for s, r, c in objs))
    bare = VisualProblem("hand-0", kind, scene, asked)
    return VisualProblem("hand-0", kind, scene, asked, V._tags(kind, scene, asked, bare.reads()))


def _bars(*heights: int) -> VisualProblem:
    return _hand("bars", [("bar", 3 - k, c) for c, h in enumerate(heights) for k in range(h)])


def _lines(a: tuple[int, int], b: tuple[int, int], rows: tuple[int, int] = (0, 2)) -> VisualProblem:
    """Lines given as (start column, length); A in the upper row."""
    objs = [("line", row, start + k) for row, (start, n) in zip(rows, (a, b)) for k in range(n)]
    return _hand("lengths", objs)


# ------------------------------------------------------------------------------------ suites and streams
def test_suites_have_their_sizes_balanced_kinds_and_unique_ids_and_keys() -> None:
    for name, (_, size) in V.SUITES.items():
        suite = _suite(name)
        assert len(suite) == size
        assert Counter(p.kind for p in suite) == {k: size // len(V.KINDS) for k in V.KINDS}
        assert len({p.id for p in suite}) == size and all(p.id.startswith(f"{name}-") for p in suite)
        assert len({p.key() for p in suite}) == size
    with pytest.raises(KeyError):
        V.visual_suite("no-such-suite")


def test_suite_is_deterministic_across_cache_clears() -> None:
    def snapshot() -> list[tuple]:
        return [(p.id, p.key(), p.tags, p.text("original"), p.text("rephrased"), p.answer, p.solution())
                for p in _suite()]

    first = snapshot()
    V.visual_suite.cache_clear()
    assert snapshot() == first


def test_same_seed_gives_identical_problems_and_identical_image_bytes() -> None:
    a, b = _stream(7, 200), _stream(7, 200)
    assert a == b
    assert all(x.image().tobytes() == y.image().tobytes() for x, y in zip(a, b))
    assert a[0].image().tobytes() == a[0].image().tobytes()  # drawn afresh, still identical
    assert _stream(8, 200) != a


def test_suites_are_held_out_from_training_streams() -> None:
    held = V.held_out_keys()
    assert held == {p.key() for name in V.SUITES for p in _suite(name)}
    suite_ids = {p.id for name in V.SUITES for p in _suite(name)}
    for seed in (0, 1):
        stream = _stream(seed)
        assert not {p.key() for p in stream} & held
        assert not {p.id for p in stream} & suite_ids
    assert not {p.key() for p in _suite("micro-visual-test")} & {p.key() for p in _suite("micro-visual-dev")}


def test_held_out_exclusion_does_not_starve_any_kind() -> None:
    stream = _stream(3)
    counts = Counter(p.kind for p in stream)
    assert set(counts) == set(V.KINDS)
    assert all(0.2 < counts[k] / len(stream) < 0.3 for k in V.KINDS), counts
    # a 4 x 4 grid has few line and bar layouts: the suites hold out ~5 % of line and ~2 % of bar draws, not more
    held, rng = V.held_out_keys(), random.Random(3)
    draws = [V.random_visual_problem(rng, "x") for _ in range(8000)]
    for kind in V.KINDS:
        of_kind = [p for p in draws if p.kind == kind]
        assert sum(p.key() in held for p in of_kind) / len(of_kind) < 0.08, kind


# ---------------------------------------------------------------------------------------------- images
def test_images_are_32x32_rgb_and_pixels_outside_the_inset_boxes_of_drawn_cells_are_white() -> None:
    for p in _suite()[:120]:
        img = p.image()
        assert img.mode == "RGB" and img.size == (32, 32)
        px = _pixels(p)
        inside = np.zeros((32, 32), dtype=bool)
        for o in p.scene:
            x0, y0, x1, y1 = V.cell_box(o.row, o.col)
            assert (x1 - x0, y1 - y0) == (5, 5) and x0 >= o.col * 8 + 1 and x1 <= o.col * 8 + 6
            inside[y0:y1 + 1, x0:x1 + 1] = True
        assert (px[~inside] == 255).all(), p.id
        assert (px[inside] != 255).any(axis=-1).any(), p.id


def test_the_scene_can_be_read_back_exactly_from_the_pixels() -> None:
    for p in _suite()[:120]:
        found = _scene_from_pixels(_pixels(p))
        drawn = sorted(p.scene, key=lambda o: (o.row, o.col))
        assert [(r, c, col) for _, r, c, col in found] == [(o.row, o.col, o.colour) for o in drawn], p.id
        for (names, *_), o in zip(found, drawn):
            assert o.shape in names
            if o.shape in V.SHAPES:  # the three shapes have distinct pixel masks
                assert len([n for n in names if n in V.SHAPES]) == 1


def test_shape_masks_are_distinct_and_fit_the_inset_box() -> None:
    masks = {n: set(m) for n, m in V.MASKS.items()}
    for a, b in itertools.combinations(V.SHAPES, 2):
        assert len(masks[a] ^ masks[b]) >= 12, (a, b)
    assert all(0 <= y < 6 and 0 <= x < 6 for m in masks.values() for y, x in m)
    assert {y for y, _ in masks["line"]} == {2, 3}  # 2 px thick, centred in the 8-px cell (rows 3 and 4)
    assert all(len(set(rgb) - {0}) == 1 for rgb in V.COLOURS.values())  # pure, single-channel colours


# ---------------------------------------------------------------------------------- scenes and answers
def test_answers_match_what_is_drawn_and_scenes_follow_the_rules() -> None:
    problems = list(_suite()) + _stream(11, 600)
    for p in problems:
        assert p.answer == _expected_answer(p), p.id
        cells = [(o.row, o.col) for o in p.scene]
        assert len(cells) == len(set(cells)) and all(0 <= r < 4 and 0 <= c < 4 for r, c in cells)
        assert p.scene == tuple(sorted(p.scene)) and hash(p.key()) is not None
        if p.kind == "count":
            assert all(o.shape in V.SHAPES for o in p.scene) and 2 <= len(p.scene) <= 8
            assert 1 <= int(p.answer) <= 6 and int(p.answer) < len(p.scene)
        elif p.kind == "total":
            assert len(set(p.asked)) == 2 and len(p.scene) <= 8
            assert all(1 <= sum(o.shape == s for o in p.scene) <= 4 for s in p.asked)
        elif p.kind == "bars":
            heights = [sum(o.col == c for o in p.scene) for c in range(4)]
            assert all(1 <= h <= 4 for h in heights) and heights.count(max(heights)) == 1
            assert all({o.row for o in p.scene if o.col == c} == set(range(4 - h, 4)) for c, h in enumerate(heights))
            assert all(o.shape == "bar" for o in p.scene) and p.answer in "ABCD"
        else:
            rows = sorted({o.row for o in p.scene})
            assert len(rows) == 2 and all(o.shape == "line" for o in p.scene) and p.answer in "AB"
            spans = [sorted(o.col for o in p.scene if o.row == r) for r in rows]
            assert all(s == list(range(s[0], s[-1] + 1)) for s in spans) and len(spans[0]) != len(spans[1])
        assert 0 <= int(p.answer) <= 16 if p.kind in ("count", "total") else p.answer in "ABCD"


def test_all_kinds_levels_and_tags_appear_and_tags_are_consistent() -> None:
    suite = _suite()
    assert {p.kind for p in suite} == set(V.KINDS)
    assert {p.level for p in suite} == {1, 2, 3}
    assert all(p.kind in p.tags for p in suite)
    for p in suite:
        r = p.reads()
        if p.kind in ("count", "total"):
            assert ("many" in p.tags) == (max(r) >= 4)
            assert ("last-column" in p.tags) == any(o.col == 3 and o.shape in p.asked for o in p.scene)
        if p.kind == "bars":
            top, second = sorted(r, reverse=True)[:2]
            assert ("close" in p.tags) == (top - second == 1)
    assert all(Counter(t for p in suite for t in p.tags)[t] >= 20 for t in ("last-column", "many", "close"))


def test_views_word_the_question_differently_but_share_id_and_answer() -> None:
    for p in _suite()[:40]:
        orig, reph = p.text("original"), p.text("rephrased")
        assert orig != reph and orig.strip() and reph.strip()
        for s in p.asked:
            assert V.PLURAL[s] in orig and V.PLURAL[s] in reph
    p = _suite()[0]
    assert p.text() == p.text("original")
    with pytest.raises(ValueError):
        p.text("sideways")
    assert _suite()[2].text() == "Which bar is the tallest? Choices: A, B, C, D"


# -------------------------------------------------------------------------------------------- solutions
def test_solutions_are_short_well_formed_and_end_in_the_boxed_answer() -> None:
    for p in list(_suite()) + _stream(12, 400):
        sol = p.solution()
        assert sol.endswith(f"\\boxed{{{p.answer}}}") and len(sol) <= MAX_SOLUTION_CHARS, sol
        m = SOLUTION_RE[p.kind].match(sol)
        assert m, sol
        if p.kind == "total":
            na, nb, a, b, s = (int(m.group(i)) for i in (2, 4, 5, 6, 7))
            assert (a, b, s) == (na, nb, na + nb)
    assert _hand("count", [("circle", 0, 0), ("circle", 1, 1), ("square", 2, 2)], ("circle",)).solution() == \
        "circles:2;\\boxed{2}"
    assert _bars(2, 4, 1, 3).solution() == "A2,B4,C1,D3;\\boxed{B}"
    assert _lines((0, 3), (1, 2)).solution() == "A3,B2;\\boxed{A}"


# -------------------------------------------------------------------------------------------------- flaws
def test_flaws_misread_as_specified_on_hand_built_scenes() -> None:
    edge_count = _hand("count", [("circle", 0, 0), ("circle", 1, 3), ("square", 2, 3)], ("circle",))
    assert flawed_solution("edge-blind", edge_count, random.Random(0), 1.0, 0.0) == "circles:1;\\boxed{1}"
    assert flawed_solution("undercount", edge_count, random.Random(0), 1.0, 0.0) == edge_count.solution()
    assert flawed_solution("edge-blind", _bars(1, 3, 1, 4), random.Random(0), 1.0, 0.0) == "A1,B3,C1,D3;\\boxed{B}"
    assert flawed_solution("undercount", _bars(2, 1, 3, 1), random.Random(0), 1.0, 0.0) == "A2,B1,C2,D1;\\boxed{A}"
    assert flawed_solution("undercount", _bars(1, 1, 4, 3), random.Random(0), 1.0, 0.0) == "A1,B1,C3,D2;\\boxed{C}"
    assert flawed_solution("edge-blind", _lines((0, 2), (1, 3)), random.Random(0), 1.0, 0.0) == "A2,B2;\\boxed{A}"
    assert flawed_solution("undercount", _lines((0, 2), (0, 3)), random.Random(0), 1.0, 0.0) == "A2,B2;\\boxed{A}"
    many = _hand("count", [("square", r, c) for r, c in ((0, 0), (0, 1), (1, 1), (2, 2))] + [("triangle", 3, 0)],
                 ("square",))
    assert flawed_solution("undercount", many, random.Random(0), 1.0, 0.0) == "squares:3;\\boxed{3}"
    assert flawed_solution("shape-mix", many, random.Random(0), 1.0, 0.0) == "squares:5;\\boxed{5}"
    tri = _hand("total", [("triangle", 0, 0), ("circle", 1, 1), ("circle", 2, 2)], ("circle", "triangle"))
    assert flawed_solution("shape-mix", tri, random.Random(0), 1.0, 0.0) == "circles:2,triangles:0;2+0=2;\\boxed{2}"
    with pytest.raises(ValueError):
        flawed_solution("colour-blind", tri, random.Random(0), 1.0, 0.0)


def test_flawed_solutions_without_flaw_or_noise_are_correct_and_noise_moves_one_read_out_by_one() -> None:
    suite = _suite()
    for flaw in V.FLAWS + ("none",):
        assert all(flawed_solution(flaw, p, random.Random(1), 0.0, 0.0) == p.solution() for p in suite)
    rng, moved = random.Random(2), []
    for p in suite:
        sol = flawed_solution("none", p, rng, 0.0, 1.0)
        nums = [int(x) for x in SOLUTION_RE[p.kind].match(sol).groups() if x.isdigit()]
        true = [int(x) for x in SOLUTION_RE[p.kind].match(p.solution()).groups() if x.isdigit()]
        reads = nums[:len(p.reads())]
        moved.append(sum(abs(a - b) for a, b in zip(reads, p.reads())))
        assert len(nums) == len(true)
        assert sol.endswith(f"\\boxed{{{V.answer_from_reads(p.kind, reads)}}}")
    assert set(moved) <= {0, 1} and moved.count(1) > 0.9 * len(moved)  # 0 only where a read-out is clamped


def test_flawed_solution_always_consumes_four_draws() -> None:
    ref = random.Random(5)
    expected = [ref.random() for _ in range(4)] and ref.random()
    for p in _suite()[:12]:
        for flaw, p_sys, p_noise in (("edge-blind", 1.0, 1.0), ("shape-mix", 0.0, 0.0), ("none", 0.5, 0.5)):
            rng = random.Random(5)
            flawed_solution(flaw, p, rng, p_sys, p_noise)
            assert rng.random() == expected


def test_each_flaw_changes_a_sizeable_share_of_answers_and_the_pockets_overlap_only_partly() -> None:
    for name in V.SUITES:
        suite = _suite(name)
        pockets = _pockets(suite)
        for flaw, pocket in pockets.items():
            assert 0.2 <= len(pocket) / len(suite) <= 0.5, (name, flaw, len(pocket) / len(suite))
        edge, under = pockets["edge-blind"], pockets["undercount"]
        assert edge != under and edge - under and under - edge
        assert len(edge & under) / len(edge | under) < 0.5
        # each main flaw's pocket lies in every kind but is shaped differently (the third flaw only in counting)
        for flaw in ("edge-blind", "undercount"):
            assert {p.kind for p in suite if p.id in pockets[flaw]} == set(V.KINDS)
        assert {p.kind for p in suite if p.id in pockets["shape-mix"]} == {"count", "total"}
    stream = _stream(4, 1500)
    for flaw, pocket in _pockets(stream).items():
        assert 0.25 <= len(pocket) / len(stream) <= 0.45, (flaw, len(pocket) / len(stream))


def test_flawed_answers_are_valid_answers() -> None:
    for p in _suite():
        for flaw in V.FLAWS:
            ans = _flawed_answer(flaw, p)
            if p.kind in ("count", "total"):
                assert ans.isdigit() and 0 <= int(ans) <= 16
            else:
                assert ans in ("ABCD" if p.kind == "bars" else "AB")
