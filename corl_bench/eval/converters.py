"""Data converters: how a benchmark's rows reach the project's row schema, named by a spec's ``source.converter``.

A converter is a :class:`Converter` record in the :data:`corl_bench.registries.CONVERTERS` registry (chosen over a
plain table so that a package can add one through the entry-point group ``corl_bench.converters``, exactly as methods
and graders are added). :mod:`corl_bench.eval.data` looks the spec's converter up by name; nothing is chosen by a
benchmark's name or its hub dataset. The built-ins:

    columns        (the default when a spec names none) ``datasets.load_dataset`` rows, columns renamed by
                   ``source.fields``, the answer cut after ``source.answer_after`` (GSM8K's "####")
    gpqa           ``Idavidrein/gpqa`` rows -> the local copy's schema, options in the paper's order
                   (:func:`corl_bench.eval.gpqa.gpqa_rows`)
    livecodebench  ``livecodebench/code_generation_lite``: the release's files downloaded with ``huggingface_hub``
                   (no ``datasets``), a local folder of those files read as a release, frozen as
                   ``<folder>/<release>.jsonl``
    mmlu           ``cais/mmlu`` rows (answer = an option index) -> the local schema, answer = the letter
                   (:func:`corl_bench.eval.science.mmlu_rows`)
    scibench       ``xw27/scibench`` rows -> the local schema, the problem with its unit sentence as CoMAS's
                   evaluation asks it (:func:`corl_bench.eval.science.scibench_rows`)
    mathvision, mathverse, mathvista, wemath
                   the multimodal sets' hub rows -> the local schema, images kept as PIL for
                   :func:`corl_bench.eval.multimodal.attach_hub`

A spec that reads a hub dataset a converter claims (:attr:`Converter.hub_paths`) but names another converter, or none,
is refused when it is parsed, naming the converter to set. A plugin converter::

    # my_pkg/convert.py
    MYSET = Converter("myset", hub_paths=("me/myset",), convert=lambda spec, records: [...])
    # pyproject.toml
    [project.entry-points."corl_bench.converters"]
    myset = "my_pkg.convert:MYSET"
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from corl_bench.config import ConfigError

if TYPE_CHECKING:
    from corl_bench.eval.specs import BenchmarkSpec

__all__ = ["COLUMNS", "Converter", "GPQA", "LIVECODEBENCH", "MATHVERSE", "MATHVISION", "MATHVISTA", "MMLU", "SCIBENCH",
           "WEMATH", "converter_for"]

Rows = list[dict[str, Any]]
LCB_HUB_KEYS = ("path", "version_tag", "revision")


@dataclass(frozen=True)
class Converter:
    """How one kind of benchmark data becomes rows in the project's schema (every hook optional)."""

    name: str
    hub_paths: tuple[str, ...] = ()
    """hub datasets whose rows need this converter: a spec reading one must name it"""
    convert: Callable[["BenchmarkSpec", Iterable[Mapping[str, Any]]], Rows] | None = None
    """``datasets.load_dataset`` rows -> local rows; None = rename columns by ``source.fields`` (``columns``)"""
    fetch: Callable[["BenchmarkSpec"], Rows] | None = None
    """the hub copy's rows without ``datasets.load_dataset`` (LiveCodeBench downloads its files)"""
    read_local: Callable[["BenchmarkSpec", Path], Rows] | None = None
    """rows of a local copy; None = a JSONL file in the project's schema"""
    frozen_file: Callable[["BenchmarkSpec"], str] | None = None
    """where ``corl-bench data prepare`` writes the rows, relative to the destination; None = ``source.local``"""
    needs: str = "datasets"
    """the package that reads the hub copy (named in the error when it is missing)"""


def converter_for(spec: "BenchmarkSpec") -> Converter:
    """The spec's converter (``columns`` when it names none); a one-line ConfigError for a registered object that is
    not a :class:`Converter`."""
    from corl_bench.registries import CONVERTERS, RegistryError

    try:
        conv = CONVERTERS.get(spec.source.converter or "columns")
    except RegistryError as e:
        raise ConfigError(f"benchmark {spec.name}: source.converter: {e}") from None
    if not isinstance(conv, Converter):
        raise ConfigError(f"benchmark {spec.name}: data converter {spec.source.converter!r} is a "
                          f"{type(conv).__name__}, not a corl_bench.eval.converters.Converter; register a Converter")
    return conv


# ------------------------------------------------------------------------------------------------ built-ins
def _gpqa(spec: "BenchmarkSpec", records: Iterable[Mapping[str, Any]]) -> Rows:
    from corl_bench.eval.gpqa import gpqa_rows

    return gpqa_rows(records, spec.name, spec.source.local or "gpqa_diamond_orig/test.jsonl")


def _mmlu(spec: "BenchmarkSpec", records: Iterable[Mapping[str, Any]]) -> Rows:
    from corl_bench.eval.science import convert_mmlu

    return convert_mmlu(spec, records)


def _scibench(spec: "BenchmarkSpec", records: Iterable[Mapping[str, Any]]) -> Rows:
    from corl_bench.eval.science import convert_scibench

    return convert_scibench(spec, records)


def release(spec: "BenchmarkSpec") -> str:
    """A LiveCodeBench spec's release (``source.hub.version_tag``, default the newest the project knows)."""
    from corl_bench.eval.livecodebench import DEFAULT_RELEASE

    return str((spec.source.hub or {}).get("version_tag") or DEFAULT_RELEASE)


def _lcb_fetch(spec: "BenchmarkSpec") -> Rows:
    from corl_bench.eval.livecodebench import from_hub

    hub = dict(spec.source.hub or {})
    unknown = sorted(set(hub) - set(LCB_HUB_KEYS))
    if unknown:
        raise ConfigError(f"benchmark {spec.name}: source.hub.{unknown[0]} is not used for {hub.get('path')} (its "
                          f"files are downloaded directly; no loading script); valid: {', '.join(LCB_HUB_KEYS)}")
    return from_hub(release(spec), hub.get("revision"), spec.source.local or "livecodebench")


def _lcb_read(spec: "BenchmarkSpec", path: Path) -> Rows:
    from corl_bench.eval.livecodebench import read_release

    return read_release(path, release(spec))


def _lcb_frozen(spec: "BenchmarkSpec") -> str:
    from corl_bench.eval.livecodebench import frozen_name

    return f"{str(spec.source.local).rstrip('/')}/{frozen_name(release(spec))}"


def _multimodal(attr: str) -> Callable[["BenchmarkSpec", Iterable[Mapping[str, Any]]], Rows]:
    """A converter function over one of :mod:`corl_bench.eval.multimodal`'s per-record converters."""
    def convert(spec: "BenchmarkSpec", records: Iterable[Mapping[str, Any]]) -> Rows:
        from corl_bench.eval import multimodal as mm

        return mm.convert_hub(spec, records, getattr(mm, attr))
    return convert


COLUMNS = Converter("columns")
GPQA = Converter("gpqa", hub_paths=("Idavidrein/gpqa",), convert=_gpqa)
MMLU = Converter("mmlu", hub_paths=("cais/mmlu",), convert=_mmlu)
SCIBENCH = Converter("scibench", hub_paths=("xw27/scibench",), convert=_scibench)
LIVECODEBENCH = Converter("livecodebench", hub_paths=("livecodebench/code_generation_lite",), fetch=_lcb_fetch,
                          read_local=_lcb_read, frozen_file=_lcb_frozen, needs="huggingface_hub")
MATHVISION = Converter("mathvision", hub_paths=("MathLLMs/MathVision",), convert=_multimodal("_mathvision"))
MATHVERSE = Converter("mathverse", hub_paths=("AI4Math/MathVerse",), convert=_multimodal("_mathverse"))
MATHVISTA = Converter("mathvista", hub_paths=("AI4Math/MathVista",), convert=_multimodal("_mathvista"))
WEMATH = Converter("wemath", hub_paths=("We-Math/We-Math",), convert=_multimodal("_wemath"))
