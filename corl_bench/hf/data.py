"""Real training sets for the ``hf`` profile: named sets, JSONL files and hub datasets, read in seeded epochs.

``data.train`` names one of

    math-level345   MATH levels 3-5 with the MATH-500 problems removed (the paper's training set; 8,888 problems)
                    local ``math_level345/train.jsonl``; hub ``q1716523669/MATH-Level345`` (columns prompt, answer)
    math-train      Hendrycks MATH train (7,500)          local ``math_train/train.jsonl``
    dapo-math       DAPO-Math-17k, deduplicated English part (14,116)   local ``dapo_math/train.jsonl``
    gsm8k-train     GSM8K train (7,473)                   local ``gsm8k/train.jsonl``
    arith-1digit    "What is 7 x 3?" with single-digit operands (5,000, generated in code: no file; not a paper set)
    arith-small     "What is 13 + 7?": +, - to 20, x to 12 (353 problems, generated; the real study's training part,
                    disjoint from the benchmark ``arith-heldout``: :mod:`corl_bench.hf.arith`)
    multimodal-open-r1-8k-verified   the paper's VLM set "open-r1" (image + problem; the answer is the <answer> tag
                    of ``solution``)             local ``multimodal_open_r1/train.jsonl``; hub
                    ``lmms-lab/multimodal-open-r1-8k-verified``
    mmr1            the paper's VLM set "MMR1" (5,782)   local ``mmr1/train.jsonl``; hub ``MMR1/MMR1-Math-RL-Data-v0``
    geometry3k      Geometry3K train (2,101)             local ``geometry3k/train.jsonl``; hub ``hiyouga/geometry3k``
    <file>.jsonl    any JSONL file with ``problem`` (or ``prompt``/``question``), ``answer`` and optionally ``id``
    hub:owner/name[:split]   a hub dataset (``datasets.load_dataset``; default split train), columns as for JSONL

Local copies are looked up in ``data.data_dir``, then ``$CORL_BENCH_DATA`` (the same directories as benchmark data,
:func:`corl_bench.eval.data.data_dirs`), then the hub (only when ``datasets`` is installed and the hub or its cache
has the data). Nothing is read until the run needs it; every failure is one line naming the fix.

Multimodal sets (and any JSONL whose rows name images) carry their images on the problem (``TrainProblem.images``):
a local copy uses the shared schema (``id``, ``problem``, ``answer``, ``image`` — a path relative to the JSONL's folder,
or ``images``, a list — and ``choices``), resolved to absolute paths when read (a missing file is one line); hub rows
keep their embedded images as PIL images. The hf profile's ``render`` attaches them to the request. ``<image>``
placeholders in a problem's text (the EasyR1 layout of MMR1 and Geometry3K) are removed: the model's processor places
the images. A multiple-choice row (``choices`` given, ``answer`` an option letter) gets its options appended as
``(A) text`` lines.

The stream (:meth:`TrainingSet.epochs`) walks the set in epochs, each in the order ``random.Random(f"{seed}:{epoch}")``
shuffles it into, so a resumed run replays exactly the same problems (the trainer's resume contract). Before the
first problem is drawn, :meth:`TrainingSet.decontaminate` drops every problem whose text equals a benchmark problem
exactly or after normalisation (NFKC, all whitespace removed, lowercase) and reports what it dropped. Answers are
carried for diagnostics and for methods that declare ``uses_labels``; the trainer gives them to no other method.
"""

from __future__ import annotations

import json
import logging
import random
import re
import unicodedata
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from corl_bench.config import ConfigError, machine_problem

log = logging.getLogger(__name__)

INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
"""The paper's instruction, appended to every training problem (``"{problem}\\n {instruction}"``, its exact format)."""
ANSWER_TAG_INSTRUCTION = ("Output the thinking process in <think> </think> and final answer in <answer> </answer> "
                          "tags.")
"""The paper's vision-language training instruction (R1-V; ``"{problem} {instruction}"``, no system message), asked by
a cohort agent's ``prompt: r1v`` and read with ``rollout.extractor=answer_tag``."""
DEFAULT_TRAIN = "math-level345"


@dataclass(frozen=True)
class NamedSet:
    name: str
    local: str
    """file relative to a data directory"""
    hub: Mapping[str, Any]
    """``datasets.load_dataset`` arguments of the hub copy"""
    fields: Mapping[str, str] = field(default_factory=dict)
    """hub column -> our field"""
    answer_after: str | None = None
    """hub rows: the answer is the text after the last occurrence of this marker (GSM8K's "####")"""
    answer_from_solution: bool = False
    """hub rows: the answer is the last ``\\boxed{}`` of ``solution``"""
    description: str = ""
    images_field: str | None = None
    """hub rows: the column holding the image (or list of images) of a multimodal set"""
    answer_from_answer_tag: bool = False
    """hub rows: the answer is the content of the last ``<answer>`` tag of ``solution`` (multimodal open-r1)"""


NAMED = {
    "math-level345": NamedSet("math-level345", "math_level345/train.jsonl",
                              {"path": "q1716523669/MATH-Level345", "split": "train"}, {"prompt": "problem"},
                              description="MATH levels 3-5 minus MATH-500 (the paper's training set)"),
    "math-train": NamedSet("math-train", "math_train/train.jsonl",
                           {"path": "DigitalLearningGmbH/MATH-lighteval", "split": "train"},
                           answer_from_solution=True, description="Hendrycks MATH train, all levels"),
    "dapo-math": NamedSet("dapo-math", "dapo_math/train.jsonl",
                          {"path": "open-r1/DAPO-Math-17k-Processed", "name": "en", "split": "train"},
                          {"prompt": "problem", "solution": "answer"}, description="DAPO-Math-17k (English, dedup.)"),
    "gsm8k-train": NamedSet("gsm8k-train", "gsm8k/train.jsonl", {"path": "openai/gsm8k", "name": "main",
                                                                  "split": "train"},
                            {"question": "problem"}, answer_after="####", description="GSM8K train"),
    "multimodal-open-r1-8k-verified": NamedSet(
        "multimodal-open-r1-8k-verified", "multimodal_open_r1/train.jsonl",
        {"path": "lmms-lab/multimodal-open-r1-8k-verified", "split": "train"}, images_field="image",
        answer_from_answer_tag=True, description="multimodal open-r1 8k verified (the paper's VLM set open-r1)"),
    "mmr1": NamedSet("mmr1", "mmr1/train.jsonl", {"path": "MMR1/MMR1-Math-RL-Data-v0", "split": "train"},
                     images_field="images", description="MMR1-Math-RL-Data-v0 (the paper's VLM set MMR1)"),
    "geometry3k": NamedSet("geometry3k", "geometry3k/train.jsonl", {"path": "hiyouga/geometry3k", "split": "train"},
                           images_field="images", description="Geometry3K train (multimodal, geometry)"),
}
IMAGES = "_images"
"""Row key of a multimodal training row's resolved images (absolute paths, or PIL images from the hub)."""


def arith_1digit(n: int = 5000, seed: int = 0) -> list[dict[str, Any]]:
    """``arith-1digit``: "What is a op b?" with single-digit operands (+, -, x; never negative), generated with a
    fixed seed. Not a paper set: the one candidate on which the 135M/270M models answer above the floor on a CPU
    (``scripts/real_base_accuracy.py``), so a short real-model run has some signal to learn from."""
    rng = random.Random(f"arith-1digit:{seed}")
    rows = []
    for i in range(n):
        a, b, op = rng.randint(1, 9), rng.randint(1, 9), rng.choice("+-x")
        if op == "-" and b > a:
            a, b = b, a
        ans = a + b if op == "+" else a - b if op == "-" else a * b
        rows.append({"id": f"arith-1digit-{i}", "problem": f"What is {a} {op} {b}?", "answer": str(ans)})
    return rows


def _arith_small() -> list[dict[str, Any]]:
    from corl_bench.hf.arith import train_rows

    return train_rows()


def _arith_mul() -> list[dict[str, Any]]:
    from corl_bench.hf.arith import mul_train_rows

    return mul_train_rows()


#: Training sets generated in code (no file, no hub): name -> (rows(), description).
GENERATED: dict[str, tuple[Callable[[], list[dict[str, Any]]], str]] = {
    "arith-1digit": (arith_1digit, "single-digit +, -, x (generated; signal for tiny models on a CPU)"),
    "arith-small": (_arith_small, "+, - to 20 and x to 12, the training part of the real study's split "
                                  "(corl_bench.hf.arith; its held-out part is the benchmark arith-heldout)"),
    "arith-mul": (_arith_mul, "a x b with a = 12-99, b = 11-19, the training part of the Qwen setting's split "
                              "(corl_bench.hf.arith; held out: arith-mul-heldout, dev: arith-mul-dev)"),
}
VALID = f"{', '.join([*NAMED, *GENERATED])}, a .jsonl file or hub:owner/name[:split]"


@dataclass(frozen=True)
class Source:
    """A parsed ``data.train``: ``kind`` is named | generated | jsonl | hub."""

    kind: str
    name: str
    named: NamedSet | None = None
    path: str | None = None
    hub: Mapping[str, Any] | None = None


def parse_source(spec: str) -> Source:
    """``data.train`` -> :class:`Source` (no I/O); one-line ConfigError for anything else."""
    spec = (spec or DEFAULT_TRAIN).strip()
    if spec in NAMED:
        return Source("named", spec, named=NAMED[spec])
    if spec in GENERATED:
        return Source("generated", spec)
    if spec.startswith("hub:"):
        repo, _, split = spec[4:].partition(":")
        if not re.fullmatch(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*", repo):
            raise ConfigError(f"data.train={spec!r}: write hub:owner/name or hub:owner/name:split")
        return Source("hub", spec, hub={"path": repo, "split": split or "train"})
    if spec.endswith(".jsonl") or spec.endswith(".json"):
        return Source("jsonl", spec, path=spec)
    raise ConfigError(f"data.train={spec!r} is not a training set; valid: {VALID}")


def _dirs(data_dir: str | Path | None) -> list[Path]:
    from corl_bench.eval.data import data_dirs

    return data_dirs(data_dir or None)


def locate(source: Source, data_dir: str | Path | None = None) -> Path | None:
    """The local file of ``source`` (a named set's copy in a data directory, or the JSONL path), or None."""
    if source.kind == "jsonl":
        path = Path(source.path or "")
        if path.is_file():
            return path
        if not path.is_absolute():
            for root in _dirs(data_dir):
                if (root / path).is_file():
                    return root / path
        return None
    if source.kind == "named":
        for root in _dirs(data_dir):
            if (root / source.named.local).is_file():  # type: ignore[union-attr]
                return root / source.named.local  # type: ignore[union-attr]
    return None


def _datasets_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("datasets") is not None


def check_source(spec: str, data_dir: str | Path | None = None) -> Source:
    """Validate-time check (no rows are read): the set is local, or it has a hub copy and ``datasets`` is there."""
    source = parse_source(spec)
    if source.kind == "generated" or locate(source, data_dir) is not None:
        return source
    searched = ", ".join(str(d) for d in _dirs(data_dir)) or "no data directory given"
    if source.kind == "jsonl":
        machine_problem(f"data.train: {source.path} not found (looked in the working directory and {searched}); "
                        "pass an existing .jsonl file")
        return source
    local = _local_hint(source)
    if not _datasets_installed():
        machine_problem(f"data.train={source.name}: no local copy ({searched}) and the `datasets` package is not "
                        f"installed; set data.data_dir=DIR (or $CORL_BENCH_DATA) with {local}, or pip install "
                        "datasets")
        return source
    from corl_bench.hub_access import check_dataset

    repo = str((source.named.hub if source.named else source.hub or {})["path"])
    check_dataset(repo, f"data.train={source.name} ({searched})", f"set data.data_dir=DIR (or $CORL_BENCH_DATA) "
                  f"with {local}")
    return source


def boxed_answer(solution: str) -> str:
    """The last ``\\boxed{...}`` of a worked solution (empty when there is none)."""
    from corl_bench.eval.scoring import extract_boxed

    return extract_boxed(solution or "") or ""


def _local_hint(source: Source) -> str:
    """Where a local copy of ``source`` goes, for the error messages."""
    if source.named is None:
        return "a local .jsonl copy (data.train=FILE.jsonl)"
    if source.named.images_field:
        return (f"DIR/{source.named.local} and its images (rows: id, problem, answer, image = a path relative to "
                "that folder, choices)")
    return f"DIR/{source.named.local}"


def _hub_rows(source: Source) -> list[dict[str, Any]]:
    args = dict(source.named.hub if source.named else source.hub or {})
    local = _local_hint(source)
    from corl_bench.hub_access import check_dataset

    check_dataset(str(args["path"]), f"data.train={source.name}", f"set data.data_dir=DIR (or $CORL_BENCH_DATA) "
                  f"with {local}")
    if not _datasets_installed():
        raise ConfigError(f"data.train={source.name}: no local copy found and the `datasets` package is not "
                          f"installed; set data.data_dir=DIR (or $CORL_BENCH_DATA) with {local}, or pip install "
                          "datasets")
    import datasets

    try:
        ds = datasets.load_dataset(args.pop("path"), **args)
    except Exception as e:  # network, auth, missing split ...
        raise ConfigError(f"data.train={source.name}: could not load it from the hub ({type(e).__name__}: "
                          f"{(str(e).splitlines() or [''])[0][:160]}); set data.data_dir=DIR (or $CORL_BENCH_DATA) "
                          f"with {local}") from None
    named = source.named
    rows = []
    for rec in ds:
        row = dict(rec)
        for src, dst in (named.fields.items() if named else ()):
            if src in row and src != dst:
                row[dst] = row.pop(src)
        if named and named.answer_after and isinstance(row.get("answer"), str) and named.answer_after in row["answer"]:
            row["solution"], row["answer"] = row["answer"], \
                row["answer"].rsplit(named.answer_after, 1)[1].strip().replace(",", "")
        if named and named.answer_from_solution and not row.get("answer"):
            row["answer"] = boxed_answer(str(row.get("solution") or ""))
        if named and named.answer_from_answer_tag and not row.get("answer"):
            from corl_bench.eval.scoring import answer_tag_content

            row["answer"] = answer_tag_content(str(row.get("solution") or "")) or ""
        if named and named.images_field:
            found = row.pop(named.images_field, None)
            row[IMAGES] = [im for im in (found if isinstance(found, (list, tuple)) else [found]) if im is not None]
        rows.append(row)
    return rows


def _local_images(rows: list[dict[str, Any]], path: Path, name: str) -> list[dict[str, Any]]:
    """Resolve the ``image`` / ``images`` paths of local rows against the JSONL's folder (rows without any are
    left as they are); one-line ConfigError when a file is missing."""
    missing, total = [], 0
    for row in rows:
        refs = row.get("images") if row.get("images") is not None else row.get("image")
        if refs in (None, "", []):
            continue
        refs = list(refs) if isinstance(refs, (list, tuple)) else [refs]
        files = [path.parent / str(r) for r in refs]
        total += len(files)
        missing += [f for f in files if not f.is_file()]
        row[IMAGES] = [str(f.resolve()) for f in files]
    if missing:
        raise ConfigError(f"data.train={name}: {len(missing)} of {total} images are missing (e.g. {missing[0]}); put "
                          f"them beside {path} as the rows' image field names them (paths relative to "
                          f"{path.parent})")
    return rows


def read_rows(source: Source, data_dir: str | Path | None = None) -> tuple[list[dict[str, Any]], str]:
    """(rows, where they came from): generated, the local copy, else the hub."""
    if source.kind == "generated":
        return GENERATED[source.name][0](), "generated in code"
    path = locate(source, data_dir)
    if path is not None:
        from corl_bench.eval.data import read_jsonl

        return _local_images(read_jsonl(path), path, source.name), str(path)
    if source.kind == "jsonl":
        check_source(source.name, data_dir)  # raises the not-found message
    return _hub_rows(source), f"hub {(source.named.hub if source.named else source.hub or {}).get('path')}"


def normalise(text: str) -> str:
    """The contamination key: NFKC, every whitespace character removed, lowercase."""
    return "".join(unicodedata.normalize("NFKC", text).split()).lower()


_OPTION_LABEL = re.compile(r"(?im)^[ \t]*(?:choices:[ \t]*$|\(?[A-Z]\)[ \t]*|[A-Z][:.][ \t]*)")


def option_blind(text: str) -> str:
    """The contamination key of a multiple-choice problem whatever its options' layout: :func:`normalise` after
    removing a ``Choices:`` line and the option labels that open a line (``(A)``, ``A)``, ``A:``, ``A.``). A training
    row appends its options as ``Choices:\\n(A) ...`` while a benchmark writes them its own way (MathVision:
    ``(A) ...`` lines, MathVerse: ``A:...``), so the same problem differs only there."""
    return normalise(_OPTION_LABEL.sub("", text))


@dataclass(frozen=True)
class TrainProblem:
    """One training problem: ``id`` (shared by its views), the problem text, the hidden ``answer``. The rephrased
    view comes from ``rephraser`` (the profile's :class:`corl_bench.hf.rephrase.Rephraser`), written on first use."""

    id: str
    problem: str
    answer: str
    source: str = ""
    rephraser: Any = field(default=None, compare=False, repr=False)
    images: tuple[Any, ...] = field(default=(), compare=False, repr=False)
    """the problem's images (absolute paths, or PIL images from the hub), in order; empty for text problems"""

    def text(self, view: str = "original") -> str:
        if view == "original":
            return self.problem
        if view == "rephrased":
            if self.rephraser is None:
                raise RuntimeError(f"problem {self.id}: no rephraser is set up for the rephrased view")
            return self.rephraser.rephrase(self)
        raise ValueError(f"unknown view {view!r}; valid: original, rephrased")


_IMAGE_TAG = re.compile(r"<image>[ \t]*")


def _problem_text(row: Mapping[str, Any]) -> Any:
    for key in ("problem", "prompt", "question"):
        if row.get(key) not in (None, ""):
            return row[key]
    return None


def build_problems(rows: Iterable[Mapping[str, Any]], name: str) -> list[TrainProblem]:
    """Rows -> problems; one-line ConfigError for a row without text or with a duplicate id."""
    out, seen, unlabeled = [], set(), 0
    for i, row in enumerate(rows):
        text = _problem_text(row)
        rid = str(row.get("id", f"{name}-{i}"))
        if not isinstance(text, str):
            raise ConfigError(f"data.train={name}: row {rid!r} has no problem text (fields problem, prompt or "
                              "question); fix the file")
        if rid in seen:
            raise ConfigError(f"data.train={name}: duplicate id {rid!r}; every row needs a unique id (or none)")
        seen.add(rid)
        answer = row.get("answer")
        if answer in (None, ""):
            unlabeled += 1
        images = tuple(row.get(IMAGES) or ())
        if images:
            text = _IMAGE_TAG.sub("", text).strip()
            choices = row.get("choices")
            if choices and isinstance(answer, str) and len(answer.strip()) == 1 and answer.strip().isupper():
                from corl_bench.eval.items import options_text

                text += "\nChoices:\n" + options_text(list(choices), skip_empty=True)
        out.append(TrainProblem(rid, text, "" if answer is None else str(answer), name, images=images))
    if not out:
        raise ConfigError(f"data.train={name}: the training set is empty")
    if unlabeled:
        log.warning("data.train=%s: %d of %d problems have no answer (label diagnostics and label-using methods "
                    "see an empty answer for them)", name, unlabeled, len(out))
    return out


class TrainingSet:
    """The problems of one training set, decontaminated once, streamed in seeded epochs."""

    def __init__(self, name: str, problems: Sequence[TrainProblem], origin: str = "") -> None:
        self.name = name
        self.problems = list(problems)
        self.origin = origin
        self.report: dict[str, Any] | None = None

    @classmethod
    def load(cls, spec: str, data_dir: str | Path | None = None) -> "TrainingSet":
        source = parse_source(spec)
        rows, origin = read_rows(source, data_dir)
        problems = build_problems(rows, source.name)
        log.info("training set %s: %d problems from %s", source.name, len(problems), origin)
        return cls(source.name, problems, origin)

    def decontaminate(self, benchmarks: Mapping[str, Sequence[Any]],
                      text_of: Callable[[Any], str | None] | None = None) -> dict[str, Any]:
        """Drop every problem whose text equals a benchmark item's text exactly, after :func:`normalise`, or after
        :func:`option_blind` (a multiple-choice problem whose options are laid out otherwise);
        returns (and keeps in ``self.report``) what was checked and dropped. ``text_of(item)``: an item's
        problem text (default: its ``problem`` attribute)."""
        get = text_of or (lambda it: getattr(it, "problem", None))
        exact: dict[str, str] = {}
        norm: dict[str, str] = {}
        blind: dict[str, str] = {}
        for bench, items in benchmarks.items():
            for it in items:
                text = get(it)
                if isinstance(text, str) and text.strip():
                    exact.setdefault(text.strip(), bench)
                    norm.setdefault(normalise(text), bench)
                    blind.setdefault(option_blind(text), bench)
        per: dict[str, dict[str, int]] = {b: {"exact": 0, "normalised": 0, "options": 0} for b in benchmarks}
        kept, dropped = [], []
        for p in self.problems:
            bench = exact.get(p.problem.strip())
            how = "exact"
            if bench is None:
                bench, how = norm.get(normalise(p.problem)), "normalised"
            if bench is None:
                bench, how = blind.get(option_blind(p.problem)), "options"
            if bench is None:
                kept.append(p)
            else:
                per[bench][how] += 1
                dropped.append(p.id)
        self.problems = kept
        self.report = {"training_set": self.name, "checked_against": sorted(benchmarks),
                       "problems_before": len(kept) + len(dropped), "dropped": len(dropped),
                       "problems_after": len(kept), "by_benchmark": per, "dropped_ids": dropped[:20],
                       "rule": "exact text, or equal after NFKC + removing all whitespace + lowercase, or equal "
                               "after that and removing option labels ((A), A:, Choices:)"}
        if not kept:
            raise ConfigError(f"data.train={self.name}: every training problem overlaps the evaluated benchmarks "
                              f"({', '.join(sorted(benchmarks))}); pick another training set")
        return self.report

    def epochs(self, seed: int, note: Callable[[TrainProblem], None] | None = None,
               rephraser: Any = None) -> Iterator[TrainProblem]:
        """The unlimited stream: epoch ``e`` is the set in ``random.Random(f"{seed}:{e}")`` order. ``note(p)`` is
        called for every problem yielded (the rephraser batches the ones a step draws); ``rephraser`` is attached
        to every problem for its rephrased view."""
        import dataclasses

        n = len(self.problems)
        for epoch in count():
            order = list(range(n))
            random.Random(f"{seed}:{epoch}").shuffle(order)
            for i in order:
                p = self.problems[i]
                if rephraser is not None:
                    p = dataclasses.replace(p, rephraser=rephraser)
                if note is not None:
                    note(p)
                yield p


def write_jsonl(path: Path, rows: Iterable[Mapping[str, Any]]) -> None:
    """Rows as JSONL (test fixtures and the base-accuracy script)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(dict(r), ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
