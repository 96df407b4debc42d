"""Benchmark data from wherever a user has it: a local directory first, the Hugging Face hub second.

Lookup order for a spec's ``source.local`` file:

1. ``--data-dir`` (the ``data_dir`` argument),
2. ``$CORL_BENCH_DATA`` (``os.pathsep``-separated directories),
3. the hub, with the spec's ``source.hub`` arguments — only when the package it needs is installed and the hub (or
   its local cache) has the data. The spec's ``source.converter`` (:mod:`corl_bench.eval.converters`, looked up by
   name in :data:`corl_bench.registries.CONVERTERS`; ``columns`` when it names none) decides how:

   * ``livecodebench`` (``livecodebench/code_generation_lite``): the release's files (``version_tag``, e.g.
     ``release_v6`` = ``test.jsonl`` ... ``test6.jsonl``) via ``huggingface_hub``, each row converted by
     :func:`corl_bench.eval.livecodebench.convert` (decoded tests), exactly as a local folder of those files is;
   * ``gpqa`` (``Idavidrein/gpqa``, gated): ``datasets.load_dataset`` rows converted by :func:`gpqa_rows` into the
     local copy's schema with the paper's choice order; another layout is refused with a one-line error that names
     the local copy;
   * ``mathvision``, ``mathverse``, ``mathvista``, ``wemath``: ``datasets.load_dataset`` rows converted to
     the local schema by :mod:`corl_bench.eval.multimodal`, their embedded images written once to files;
   * ``columns`` (anything else): ``datasets.load_dataset``, columns renamed by ``source.fields``.

A ``modality: image`` spec's rows get their image files (absolute, and relative to the data directory) from
:mod:`corl_bench.eval.multimodal`; a local copy without its images is refused in one line that says where they go.
``source.versions`` keeps the listed versions of a multi-version set (MathVerse) and refuses one that is absent.

Local files use the project's row schema: ``id``, ``problem``, ``answer`` (math and multiple choice), plus the
task's own fields (code: ``prompt``/``test``/``entry_point`` for HumanEval; ``text``/``code``/``test_list`` for
MBPP; ``question_content``/``tests`` for LiveCodeBench; GPQA: ``question``, ``choices``, ``corl_choices``,
``corl_answer_letter``). ``corl-bench data prepare`` freezes a benchmark into a directory in that schema with a
``checksums.json`` (sha256 per file); a directory holding one is verified on every load, so a silently edited file
is refused. A LiveCodeBench folder is frozen as ``<folder>/<release>.jsonl`` (converted rows). A benchmark with images
is frozen with its images copied beside the rows (``<set>/images/...``; the checksums cover the JSONL).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
from pathlib import Path
from typing import Any, Iterable, Sequence

from corl_bench.config import ConfigError
from corl_bench.eval.converters import converter_for
from corl_bench.eval.specs import BenchmarkSpec
from corl_bench.results import sha256

__all__ = ["CHECKSUMS", "DATA_ENV", "check_available", "data_dirs", "frozen_file", "load_rows", "locate", "prepare",
           "read_jsonl"]

log = logging.getLogger(__name__)
DATA_ENV = "CORL_BENCH_DATA"
CHECKSUMS = "checksums.json"


def data_dirs(data_dir: str | Path | None = None) -> list[Path]:
    """Directories searched for local copies, in order."""
    dirs = [Path(data_dir)] if data_dir else []
    dirs += [Path(p) for p in os.environ.get(DATA_ENV, "").split(os.pathsep) if p]
    return dirs


def _verify(root: Path, rel: str) -> None:
    """Check ``root/rel`` (a file, or every listed file inside a folder) against ``root/checksums.json``."""
    sums_path = root / CHECKSUMS
    if not sums_path.is_file():
        return
    sums = json.loads(sums_path.read_text(encoding="utf-8")).get("files", {})
    if (root / rel).is_dir():
        listed = {k: v for k, v in sums.items() if k.startswith(rel.rstrip("/") + "/") and (root / k).is_file()}
    else:
        listed = {rel: sums[rel]} if rel in sums else {}
    for name, want in sorted(listed.items()):
        if sha256(root / name) != want:
            raise ConfigError(f"{root / name} does not match its checksum in {sums_path}; re-run `corl-bench data "
                              "prepare` or restore the file")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    from corl_bench.results import read_jsonl as read

    return read(path, ConfigError, f"{path}")


def _filter(rows: Iterable[dict[str, Any]], where: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in rows if all(r.get(k) == v for k, v in where.items())]


def _images_note(spec: BenchmarkSpec) -> str:
    """For an image benchmark: where its images come from (the hub dataset and config), and how to freeze them."""
    if spec.modality != "image":
        return ""
    hub = dict(spec.source.hub or {})
    config = f" (config {hub['name']})" if hub.get("name") else ""
    versions = f" (versions {', '.join(spec.source.versions)})" if spec.source.versions else ""
    return (f"; the rows with their images{versions} come from the hub dataset {hub.get('path')}{config}: freeze "
            f"them where it is reachable with corl-bench data prepare -b {spec.name} --out DIR")


def check_available(spec: BenchmarkSpec, data_dir: str | Path | None = None, field: str = "eval.benchmarks") -> None:
    """One-line ConfigError unless the benchmark's rows can be read here: a local copy, or a hub copy that the
    package it needs can fetch from the local cache or a reachable hub (no rows are read; the hub is asked once per
    process, quickly). Validation calls this for every benchmark a run evaluates."""
    if spec.profile or locate(spec, data_dir) is not None:
        return
    searched = ", ".join(str(d) for d in data_dirs(data_dir)) or "no data directory given"
    local = f"DIR/{spec.source.local}" if spec.source.local else "DIR"
    fix = (f"set data.data_dir=DIR (or ${DATA_ENV}) with {local}; `corl-bench data prepare -b {spec.name} --out DIR` "
           "writes it on a machine that reaches the hub")
    from corl_bench.config import machine_problem

    if not spec.source.hub:
        return machine_problem(f"{field}: {spec.name} has no local copy ({searched}: {spec.source.local}); {fix}")
    needs = converter_for(spec).needs
    if importlib.util.find_spec(needs) is None:
        return machine_problem(f"{field}: {spec.name} has no local copy ({searched}: {spec.source.local}) and the "
                               f"`{needs}` package for its hub copy is not installed; {fix}, or pip install {needs}")
    _check_hub(spec, f"{field}: {spec.name} ({searched})", fix)


def _check_hub(spec: BenchmarkSpec, what: str, fix: str) -> None:
    from corl_bench.hub_access import check_dataset

    check_dataset(str((spec.source.hub or {})["path"]), what, fix)


def _from_hub(spec: BenchmarkSpec) -> list[dict[str, Any]]:
    conv = converter_for(spec)
    if importlib.util.find_spec(conv.needs) is not None:
        _check_hub(spec, f"benchmark {spec.name}", f"pass --data-dir DIR (or set ${DATA_ENV}) with "  # one line, not
                   f"DIR/{spec.source.local}{_images_note(spec)}")  # the retries of an unreachable hub
    if conv.fetch is not None:
        return conv.fetch(spec)
    hub = dict(spec.source.hub or {})
    local = f"DIR/{spec.source.local}" if spec.source.local else "DIR"
    try:
        import datasets  # optional: `pip install datasets`
    except ImportError:
        raise ConfigError(f"benchmark {spec.name}: no local copy found and the `datasets` package is not "
                          f"installed; pass --data-dir DIR (or set ${DATA_ENV}) with {local}, or "
                          f"`pip install datasets`{_images_note(spec)}") from None
    path = hub.pop("path")
    try:
        ds = datasets.load_dataset(path, **hub)
    except Exception as e:  # network, auth (GPQA is gated), missing config ...
        raise ConfigError(f"benchmark {spec.name}: could not load {path} from the hub ({type(e).__name__}: "
                          f"{(str(e).splitlines() or [''])[0][:160]}); pass --data-dir DIR (or set ${DATA_ENV}) "
                          f"with {local}{_images_note(spec)}") from None
    if conv.convert is not None:
        return conv.convert(spec, ds)
    rows = []
    for i, rec in enumerate(ds):
        row = dict(rec)
        for src, dst in spec.source.fields.items():
            if src in row:
                row[dst] = row.pop(src) if src != dst else row[src]
        row.setdefault("id", str(i))
        marker = spec.source.answer_after
        if marker and isinstance(row.get("answer"), str) and marker in row["answer"]:
            row["solution"], row["answer"] = row["answer"], row["answer"].rsplit(marker, 1)[1].strip().replace(",", "")
        rows.append(row)
    return rows


def locate(spec: BenchmarkSpec, data_dir: str | Path | None = None) -> Path | None:
    """The first local copy of the spec's file (or folder), or None."""
    if not spec.source.local:
        return None
    for root in data_dirs(data_dir):
        path = root / spec.source.local
        if path.exists():
            _verify(root, spec.source.local)
            return path
    return None


def load_rows(spec: BenchmarkSpec, data_dir: str | Path | None = None) -> list[dict[str, Any]]:
    """The benchmark's rows (after ``source.where``), from the first local copy or the hub."""
    if spec.profile:
        raise ConfigError(f"benchmark {spec.name} is generated by the {spec.profile} profile; it has no data files")
    from corl_bench.eval import multimodal as mm

    path = locate(spec, data_dir)
    if path is not None:
        read_local = converter_for(spec).read_local
        rows = read_local(spec, path) if read_local is not None else read_jsonl(path)
        log.info("benchmark %s: %d rows from %s", spec.name, len(rows), path)
    elif spec.source.hub:
        rows = _from_hub(spec)
        log.info("benchmark %s: %d rows from the hub (%s)", spec.name, len(rows), spec.source.hub.get("path"))
    else:
        searched = ", ".join(str(d) for d in data_dirs(data_dir)) or "(none given)"
        raise ConfigError(f"benchmark {spec.name}: {spec.source.local} not found in {searched}; pass "
                          f"--data-dir DIR or set ${DATA_ENV} to a directory that holds it")
    rows = mm.select_versions(spec, rows, str(path) if path is not None else "the hub copy")
    rows = _filter(rows, dict(spec.source.where))
    if not rows:
        raise ConfigError(f"benchmark {spec.name}: no rows left after source.where={dict(spec.source.where)}")
    if spec.modality == "image":
        rows = mm.attach_local(spec, rows, path) if path is not None else mm.attach_hub(spec, rows)
    else:
        for row in rows:  # a text spec over a multimodal set (MathVerse Text Only): embedded images are not used
            row.pop(mm.PIL_KEY, None)
    ids = [str(r.get("id", r.get("task_id", i))) for i, r in enumerate(rows)]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"benchmark {spec.name}: duplicate ids in the data; every row needs a unique id")
    return rows


def frozen_file(spec: BenchmarkSpec) -> str:
    """Where ``prepare`` writes the spec's rows, relative to the destination: ``source.local``, or where the spec's
    converter says (the ``livecodebench`` converter: ``<folder>/<release>.jsonl``, read back by
    :func:`corl_bench.eval.livecodebench.read_release`)."""
    if not spec.source.local:
        raise ConfigError(f"benchmark {spec.name} has no source.local path to freeze into")
    frozen = converter_for(spec).frozen_file
    return frozen(spec) if frozen is not None else spec.source.local


def _frozen_row(row: dict[str, Any], dest: Path) -> dict[str, Any]:
    """The row as ``prepare`` writes it: its images copied to ``dest/<relative path>`` (unless already there),
    the loader's private keys (``_images`` ...) dropped."""
    import shutil

    from corl_bench.eval.items import IMAGES_KEY, IMAGES_REL_KEY
    from corl_bench.eval.multimodal import PIL_KEY

    for src, rel in zip(row.get(IMAGES_KEY) or (), row.get(IMAGES_REL_KEY) or ()):
        target = dest / rel
        if not target.exists() or not os.path.samefile(src, target):
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, target)
    return {k: v for k, v in row.items() if k not in (IMAGES_KEY, IMAGES_REL_KEY, PIL_KEY)}


def prepare(specs: Sequence[BenchmarkSpec], dest: Path, data_dir: str | Path | None = None) -> dict[str, Any]:
    """Freeze benchmarks into ``dest`` in the local schema, with sha256 checksums; returns the manifest."""
    from corl_bench.results import atomic_write_text

    dest.mkdir(parents=True, exist_ok=True)
    manifest_path = dest / CHECKSUMS
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {"files": {}, "benchmarks": {}}
    for spec in specs:
        rel = frozen_file(spec)
        rows = load_rows(spec, data_dir)
        target = dest / rel
        if target.parent.exists() and not target.parent.is_dir():
            raise ConfigError(f"{target.parent} is a file; remove it so that `prepare` can write {target}")
        target.parent.mkdir(parents=True, exist_ok=True)
        rows = [_frozen_row(r, dest) for r in rows]
        text = "".join(json.dumps(r, ensure_ascii=False, sort_keys=True, default=str) + "\n" for r in rows)
        atomic_write_text(target, text)
        manifest["files"][rel] = sha256(target)
        manifest["benchmarks"][spec.name] = {"version": spec.version, "file": rel, "rows": len(rows)}
    atomic_write_text(manifest_path, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest
