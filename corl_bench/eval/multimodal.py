"""Multimodal benchmark data (MathVision, MathVerse, MathVista, We-Math): images as files, hub rows in the local schema.

Local copies use the shared schema of ``../shared/data/README.md``: ``id``, ``problem``, ``answer`` (the option
letter for multiple choice), ``choices`` (option texts in A, B, ... order, or null), ``question_type``
(``multi_choice`` | ``free_form``) and ``image`` (a path relative to the set's folder — the folder of the spec's
``source.local``, e.g. ``mathvision/`` + ``images/4.jpg``; ``images`` for a list), plus each set's own fields.
:func:`attach_local` resolves them to absolute files and refuses, in one line that says where they go, a copy whose
images are missing (MathVista's local copy ships without its 1000 images).

Hub rows are converted to the same schema by the per-set functions below, chosen by the spec's ``source.converter``
(``mathvision``, ``mathverse``, ``mathvista``, ``wemath``: :mod:`corl_bench.eval.converters`), and their embedded
images (PIL) are written once as PNG into ``$CORL_BENCH_CACHE/hub-data/<set>/images/`` (default
``~/.cache/corl-bench``), laid out like a data directory, so a hub item also carries file paths
(:func:`attach_hub`). ``corl-bench data prepare`` copies the images of any source next to the frozen rows.

======================  ============================================  ===========================================
hub dataset             columns used                                   conversion
======================  ============================================  ===========================================
MathLLMs/MathVision     id, question, options, image, decoded_image,   id ``mathvision_<id>``; a ``$...$`` or
                        answer, solution, level, subject               ``\\boxed{}`` answer is unwrapped
AI4Math/MathVerse       sample_index, problem_index, problem_version,  id ``mathverse_<sample_index>``; options parsed
                        question, image, answer, question_type, ...    from the question's "Choices:" block
AI4Math/MathVista       pid, question, image, decoded_image, choices,  id ``mathvista_<pid>``; the answer (an option
                        answer, question_type, unit, precision, query  text) becomes its letter in the items
We-Math/We-Math         ID, key, question, option, answer, image_path  id ``wemath_<ID>_<key>``; options parsed from
                        (image), knowledge concept, question number    ``"A. ...;B. ..."``
======================  ============================================  ===========================================
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from corl_bench.config import ConfigError
from corl_bench.eval.items import IMAGES_KEY, IMAGES_REL_KEY
from corl_bench.eval.specs import BenchmarkSpec

log = logging.getLogger(__name__)
PIL_KEY = "_pil_images"
"""Row key of a converted hub row's embedded images (PIL), until :func:`attach_hub` writes them as files."""


def cache_root() -> Path:
    """``$CORL_BENCH_CACHE`` or ``~/.cache/corl-bench`` (where hub images are written)."""
    env = os.environ.get("CORL_BENCH_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "corl-bench"


def set_folder(spec: BenchmarkSpec) -> str:
    """The set's folder relative to a data directory (``mathvision`` for ``mathvision/test.jsonl``)."""
    return Path(spec.source.local or spec.name).parent.as_posix()


def image_refs(row: Mapping[str, Any]) -> list[Any]:
    """The row's images as given (paths relative to the set folder, PIL images, or ``{"bytes", "path"}``)."""
    refs = row.get("images")
    if refs is None:
        refs = row.get("image")
    if refs is None or refs == "":
        return []
    return list(refs) if isinstance(refs, (list, tuple)) else [refs]


def _hub_hint(spec: BenchmarkSpec) -> str:
    hub = dict(spec.source.hub or {})
    if not hub.get("path"):
        return "no hub copy is known for it"
    where = ", ".join(f"{k} {hub[k]}" for k in ("name", "split") if hub.get(k))
    return (f"or use the hub copy ({hub['path']}{f', {where}' if where else ''}; needs `datasets` and hub access): "
            f"corl-bench data prepare -b {spec.name} --out DIR with no local copy on the search path, then "
            "--data-dir DIR")


def _pattern(ref: str, rid: str) -> str:
    """``images/<pid>.jpg`` when the file is named after the row's id (MathVista), else the path itself."""
    p = Path(ref)
    return (p.parent / f"<pid>{p.suffix}").as_posix() if rid.rsplit("_", 1)[-1] == p.stem else ref


def attach_local(spec: BenchmarkSpec, rows: list[dict[str, Any]], path: Path) -> list[dict[str, Any]]:
    """Resolve every row's images against the folder of ``path`` (the local JSONL); one-line ConfigError when any
    is missing, naming where they go."""
    folder, rel_folder = path.parent, set_folder(spec)
    missing: list[tuple[str, str]] = []
    for i, row in enumerate(rows):
        refs = image_refs(row)
        bad = [r for r in refs if not isinstance(r, str)]
        if bad:
            raise ConfigError(f"benchmark {spec.name}: row {row.get('id', i)!r} of {path} names its image as "
                              f"{type(bad[0]).__name__}; a local copy gives paths relative to {folder}")
        files = [folder / r for r in refs]
        missing += [(str(row.get("id", i)), r) for r, f in zip(refs, files) if not f.is_file()]
        row[IMAGES_KEY] = [str(f.resolve()) for f in files]
        row[IMAGES_REL_KEY] = [f"{rel_folder}/{r}" for r in refs]
    if missing:
        rid, ref = missing[0]
        n = sum(len(image_refs(r)) for r in rows)
        raise ConfigError(f"benchmark {spec.name}: {len(missing)} of {n} images are missing (e.g. {folder / ref}); "
                          f"put them at <data-dir>/{rel_folder}/{_pattern(ref, rid)} as the rows' image field names "
                          f"them (see the data README), {_hub_hint(spec)}")
    return rows


def _pil(image: Any) -> Any:
    """A PIL image from a PIL image or a datasets ``{"bytes", "path"}`` record."""
    if isinstance(image, Mapping) and image.get("bytes"):
        import io

        from PIL import Image

        return Image.open(io.BytesIO(image["bytes"]))
    return image


def attach_hub(spec: BenchmarkSpec, rows: list[dict[str, Any]], root: Path | None = None) -> list[dict[str, Any]]:
    """Write each converted hub row's embedded images once into ``root/<set>/images/<id>[_k].png`` (default
    :func:`cache_root` ``/ hub-data``) and give the row their paths (``image`` relative to the set folder, like a
    local copy)."""
    root = root or cache_root() / "hub-data"
    rel_folder = set_folder(spec)
    target = root / rel_folder / "images"
    written = 0
    for i, row in enumerate(rows):
        images = [_pil(im) for im in row.pop(PIL_KEY, []) or [] if im is not None]
        if not images:
            continue
        target.mkdir(parents=True, exist_ok=True)
        stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", str(row.get("id", i)))
        names = [f"{stem}.png" if len(images) == 1 else f"{stem}_{k}.png" for k in range(len(images))]
        for im, name in zip(images, names):
            file = target / name
            if not file.is_file():
                tmp = file.with_suffix(f".tmp{os.getpid()}.png")
                (im if im.mode in ("RGB", "RGBA", "L", "P", "LA") else im.convert("RGB")).save(tmp, format="PNG")
                os.replace(tmp, file)
                written += 1
        row.pop("images", None)
        row["image"] = f"images/{names[0]}" if len(names) == 1 else None
        if len(names) > 1:
            row["images"] = [f"images/{n}" for n in names]
        row[IMAGES_KEY] = [str((target / n).resolve()) for n in names]
        row[IMAGES_REL_KEY] = [f"{rel_folder}/images/{n}" for n in names]
    if written:
        log.info("benchmark %s: wrote %d hub images to %s", spec.name, written, target)
    return rows


# ------------------------------------------------------------------------------------------- hub converters
_CHOICE_LINE = re.compile(r"^\s*\(?([A-J])\)?\s*[:.)：]\s*(.*?)\s*$")
_WEMATH_OPTION = re.compile(r"(?:^|;)\s*([A-J])\.\s*")


def parse_choices_block(question: str) -> list[str] | None:
    """Option texts of a MathVerse question's ``Choices:`` block (lines ``A:text``), or None."""
    if "Choices:" not in question:
        return None
    found = [m.group(2) for m in map(_CHOICE_LINE.match, question.rsplit("Choices:", 1)[1].splitlines()) if m]
    return found or None


def parse_wemath_options(option: str) -> tuple[list[str], str]:
    """(option texts, their letters) of a We-Math ``option`` string (``"A. 300, 400;B. 400, 300; E. No correct
    answer"``); a letter may be skipped (one item is ``ABCF``)."""
    parts = _WEMATH_OPTION.split(option or "")
    letters, texts = parts[1::2], [t.strip().rstrip(";").strip() for t in parts[2::2]]
    return texts, "".join(letters)


def _unwrap(answer: Any) -> str:
    """A MathVision answer written as ``$...$`` or ``$\\boxed{...}$`` -> its content (the local copy's rule)."""
    s = str(answer).strip()
    if len(s) > 1 and s.startswith("$") and s.endswith("$"):
        s = s[1:-1].strip()
    if s.startswith("\\boxed{") and s.endswith("}"):
        s = s[len("\\boxed{"):-1].strip()
    return s


def _mathvision(rec: Mapping[str, Any]) -> dict[str, Any]:
    options = list(rec.get("options") or [])
    return {"id": f"mathvision_{rec['id']}", "problem": rec["question"], "answer": _unwrap(rec["answer"]),
            "solution": rec.get("solution"), "source": "MATH-Vision", "choices": options or None,
            "question_type": "multi_choice" if options else "free_form", "level": rec.get("level"),
            "subject": rec.get("subject"), "answer_raw": rec["answer"], PIL_KEY: [rec.get("decoded_image")]}


def _mathverse(rec: Mapping[str, Any]) -> dict[str, Any]:
    qtype = str(rec.get("question_type") or "").replace("-", "_")
    question = str(rec["question"])
    return {"id": f"mathverse_{rec['sample_index']}", "problem": question, "answer": str(rec["answer"]),
            "solution": None, "source": "MathVerse", "question_type": qtype,
            "choices": parse_choices_block(question) if qtype == "multi_choice" else None,
            "problem_index": str(rec.get("problem_index")), "problem_version": rec.get("problem_version"),
            "query_cot": rec.get("query_cot"), "metadata": rec.get("metadata"), PIL_KEY: [rec.get("image")]}


def _mathvista(rec: Mapping[str, Any]) -> dict[str, Any]:
    return {"id": f"mathvista_{rec['pid']}", "problem": rec["question"], "answer": str(rec["answer"]),
            "solution": None, "source": "MathVista", "choices": list(rec["choices"]) if rec.get("choices") else None,
            "question_type": rec.get("question_type"), "answer_type": rec.get("answer_type"), "unit": rec.get("unit"),
            "precision": rec.get("precision"), "query": rec.get("query"), "metadata": rec.get("metadata"),
            PIL_KEY: [rec.get("decoded_image")]}


def _wemath(rec: Mapping[str, Any]) -> dict[str, Any]:
    texts, letters = parse_wemath_options(str(rec.get("option") or ""))
    image = rec.get("image_path")
    return {"id": f"wemath_{rec['ID']}_{rec['key']}", "problem": rec["question"], "answer": str(rec["answer"]),
            "solution": None, "source": "We-Math", "choices": texts or None, "choice_letters": letters,
            "question_type": "multi_choice", "option_raw": rec.get("option"), "we_math_id": rec["ID"],
            "key": rec["key"], "question_number": rec.get("question number"),
            "knowledge_concept": rec.get("knowledge concept"), PIL_KEY: [image]}


def convert_hub(spec: BenchmarkSpec, records: Iterable[Mapping[str, Any]],
                convert: Callable[[Mapping[str, Any]], dict[str, Any]]) -> list[dict[str, Any]]:
    """Hub records of a multimodal set -> rows in the local schema (images still PIL, under :data:`PIL_KEY`), each
    record converted by ``convert`` (one of the per-set functions above, chosen by the spec's ``source.converter``:
    :mod:`corl_bench.eval.converters`)."""
    path = (spec.source.hub or {}).get("path")
    try:
        return [convert(rec) for rec in records]
    except KeyError as e:
        raise ConfigError(f"benchmark {spec.name}: the hub rows of {path} have no {e.args[0]!r} column (another "
                          "layout than this converter knows); use a local copy (--data-dir DIR)") from None


def select_versions(spec: BenchmarkSpec, rows: list[dict[str, Any]], origin: str) -> list[dict[str, Any]]:
    """The rows of the spec's ``source.versions`` (all rows when none are listed); a listed version with no rows is
    a one-line error naming the hub dataset that has it."""
    wanted = spec.source.versions
    if not wanted:
        return rows
    field = spec.source.version_field
    have = {str(r.get(field)) for r in rows}
    absent = [v for v in wanted if v not in have]
    if absent:
        hub = dict(spec.source.hub or {})
        name = f" (config {hub['name']})" if hub.get("name") else ""
        raise ConfigError(f"benchmark {spec.name}: version(s) {', '.join(absent)} are not in {origin} (it holds "
                          f"{', '.join(sorted(have)) or 'none'}); they come from the hub dataset {hub.get('path')}"
                          f"{name}: run where the hub is reachable (`datasets` installed) with no local "
                          f"{spec.source.local} on the search path, or freeze it there with corl-bench data prepare "
                          f"-b {spec.name} --out DIR")
    keep = set(wanted)
    return [r for r in rows if str(r.get(field)) in keep]
