"""Benchmark specifications: versioned data files (``benchmarks/*.yaml``), parsed and validated here.

A spec names everything that decides a score, so that two results with the same ``name@version`` were produced
under the same protocol::

    name: math500
    version: "1"
    task: math                       # math | mcq | code
    source:
      local: math500/test.jsonl      # relative to the data directory (--data-dir / $CORL_BENCH_DATA)
      hub: {path: HuggingFaceH4/MATH-500, split: test}
      fields: {id: unique_id, problem: problem, answer: answer}   # hub column -> our field
      converter: columns             # how hub rows become ours: corl_bench.eval.converters (columns = the default)
    prompt: "{problem}\\nPlease reason step by step, and put your final answer within \\\\boxed{{}}."
    chat_template: true              # render as one user turn with the model's chat template (if it has one)
    extractor: boxed                 # a name in corl_bench.registries.EXTRACTORS (plugins: corl_bench.extractors)
    grader: math                     # a name in corl_bench.registries.GRADERS (plugins: corl_bench.graders)
    decoding: {greedy: false, samples: 1, temperature: 0.6, top_p: 0.95, max_new_tokens: 3072}
    metrics: [avg@k, pass@k, maj@k]

Multimodal specs (MathVision, MathVerse, MathVista, We-Math) add::

    modality: image                  # every item carries its image(s) (text = none; the default)
    choices_template: "\\nChoices:\\n{options}"   # how a multiple-choice item's options follow its problem: {options}
                                     # = one "(A) text" line per option; leave it out when the problem lists them
    record_fields: [we_math_id, key] # data fields copied into every prediction row (under "meta"), e.g. for We-Math's
                                     # four-dimensional metrics
    source:
      versions: [Vision Only]        # multi-version sets (MathVerse): keep rows whose problem_version is listed

Every field is checked when a spec is loaded; a bad spec fails with one line naming the file, the field and a fix.
:data:`corl_bench.registries.BENCHMARKS` holds the shipped specs already parsed (:func:`spec_from_yaml`), frozen
:class:`BenchmarkSpec` objects whose extractor, grader and converter are the registered names.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Mapping

from corl_bench.config import ConfigError

log = logging.getLogger(__name__)

TASKS = ("math", "mcq", "code")
MODALITIES = ("text", "image")
METRIC_NAMES = ("greedy", "avg@k", "pass@k", "maj@k", "we-math")
"""``we-math``: We-Math's four-dimensional metrics (IK, IG, CM, RM; :mod:`corl_bench.eval.wemath`), from the greedy
rows grouped by the ``we_math_id`` / ``key`` the spec records in them"""


@dataclass(frozen=True)
class Decoding:
    greedy: bool = False
    """also decode greedily once per problem"""
    samples: int = 1
    """sampled completions per problem (k of avg@k / pass@k / maj@k)"""
    temperature: float = 0.6
    top_p: float = 0.95
    max_new_tokens: int = 3072
    stop: tuple[str, ...] = ()
    """generation stops at the first of these strings (the stop string is cut off)"""


@dataclass(frozen=True)
class Source:
    local: str | None = None
    """path of a JSONL file (or, for livecodebench, a folder) relative to the data directory"""
    hub: Mapping[str, Any] | None = None
    """datasets.load_dataset arguments: path, name, split (+ revision); None = no hub copy known. LiveCodeBench
    (``livecodebench/code_generation_lite``): path, version_tag (release_v1..v6) and revision, its files downloaded
    directly (see corl_bench.eval.data)"""
    fields: Mapping[str, str] = field(default_factory=dict)
    """hub column -> our field name (local files already use our schema)"""
    answer_after: str | None = None
    """hub rows: the answer is the text after the last occurrence of this marker (GSM8K's "####")"""
    where: Mapping[str, Any] = field(default_factory=dict)
    """keep rows whose field equals the value (e.g. MBPP's test split by task-id range: {split: test})"""
    generator: str | None = None
    """a procedurally generated suite (no data files): the module that generates it; the spec's ``profile`` serves
    its items (``suite``, ``size`` and ``seed`` are the generator's)"""
    suite: str | None = None
    size: int | None = None
    seed: int | None = None
    versions: tuple[str, ...] = ()
    """multi-version sets (MathVerse): keep only rows whose ``version_field`` is one of these; every listed version
    must be present in the data (a version the local copy lacks is a one-line error naming the hub dataset)"""
    version_field: str = "problem_version"
    converter: str | None = None
    """the data converter (a name in :data:`corl_bench.registries.CONVERTERS`, :mod:`corl_bench.eval.converters`)
    that turns hub (or local) rows into the project's schema; None = ``columns`` (rename by ``fields``)"""


@dataclass(frozen=True)
class BenchmarkSpec:
    name: str
    version: str
    task: str
    source: Source
    prompt: str
    extractor: str
    grader: str
    decoding: Decoding = field(default_factory=Decoding)
    metrics: tuple[str, ...] = ("avg@k", "pass@k", "maj@k")
    chat_template: bool = False
    system: str | None = None
    fewshot: int = 0
    profile: str | None = None
    """the profile that serves this generated suite (``Profile.benchmark(name)`` gives its items); None for a
    benchmark with data, which any profile that takes its modality evaluates"""
    notes: str = ""
    modality: str = "text"
    """``image``: every item carries its image file(s), resolved against the folder of ``source.local``"""
    choices_template: str | None = None
    """a multiple-choice item's options appended to its problem (``{options}`` = ``(A) text`` lines); None = not
    appended (the problem text lists them already)"""
    record_fields: tuple[str, ...] = ()
    """data fields copied into every prediction row under ``meta`` (We-Math: ``we_math_id``, ``key``)"""
    response_prefix: str = ""
    """text the answer starts with: appended to the rendered prompt (after the chat template's generation prompt),
    and the completion is graded as ``response_prefix + completion`` (EvalPlus primes an instruction-tuned model's
    reply with a sentence and an open ```` ```python ```` fence: :mod:`corl_bench.eval.native`)"""
    ask_as_trained: bool = False
    """in a training run, each agent is asked an item as it is asked a training problem (its cohort ``prompt:``
    format, chat template and stop strings, through the profile's ``render``) instead of by ``prompt`` below, which
    is what ``corl-bench eval`` (no agent) uses; for a generated suite of the training form whose agents answer only
    in their own format (the real study: SmolLM2 bare, Gemma-3 few-shot)"""

    @property
    def key(self) -> str:
        return f"{self.name}@{self.version}"

    def to_dict(self) -> dict[str, Any]:
        import dataclasses
        return dataclasses.asdict(self)


def _sub(cls: type, raw: Any, where: str) -> Any:
    import dataclasses

    if raw is None:
        return cls()
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: expected a mapping, got {type(raw).__name__}")
    valid = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - valid)
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]} is not a field; valid: {', '.join(sorted(valid))}")
    vals = dict(raw)
    if "converter" in vals and vals["converter"] is not None and not isinstance(vals["converter"], str):
        raise ConfigError(f"{where}.converter must be a converter name (got {vals['converter']!r}); "
                          "see corl_bench.eval.converters")
    for key in ("stop", "versions"):
        if key in vals:
            if isinstance(vals[key], str) or not isinstance(vals[key] or (), (list, tuple)):
                raise ConfigError(f"{where}.{key} must be a list of strings (got {vals[key]!r})")
            vals[key] = tuple(str(v) for v in vals[key] or ())
    return cls(**vals)


def parse_spec(raw: Mapping[str, Any], origin: str = "spec") -> BenchmarkSpec:
    """Validate a spec mapping (as read from YAML); one-line ConfigError naming the origin and the field."""
    import dataclasses

    from corl_bench.registries import EXTRACTORS, GRADERS

    if not isinstance(raw, Mapping):
        raise ConfigError(f"{origin}: a benchmark spec must be a mapping of fields (name, version, task, source, ...)")
    valid = {f.name for f in dataclasses.fields(BenchmarkSpec)}
    unknown = sorted(set(raw) - valid)
    if unknown:
        raise ConfigError(f"{origin}: {unknown[0]!r} is not a spec field; valid: {', '.join(sorted(valid))}")
    for key in ("name", "version", "task", "prompt", "extractor", "grader"):
        if not raw.get(key):
            raise ConfigError(f"{origin}: field {key!r} is required; add {key}: ... (see corl_bench.eval.specs)")
    where = f"{origin}: {raw['name']}"
    dec = _sub(Decoding, raw.get("decoding"), f"{where}.decoding")
    src = _converter(_sub(Source, raw.get("source"), f"{where}.source"), f"{where}.source")
    if raw["task"] not in TASKS:
        raise ConfigError(f"{where}.task must be one of {', '.join(TASKS)} (got {raw['task']!r})")
    extractor = _registered(EXTRACTORS, raw["extractor"], f"{where}.extractor")
    grader = _registered(GRADERS, raw["grader"], f"{where}.grader")
    metrics = tuple(raw.get("metrics") or ("avg@k", "pass@k", "maj@k"))
    bad = [m for m in metrics if m not in METRIC_NAMES]
    if bad:
        raise ConfigError(f"{where}.metrics: {bad[0]!r} is unknown; valid: {', '.join(METRIC_NAMES)}")
    if dec.samples < 0 or (dec.samples == 0 and not dec.greedy):
        raise ConfigError(f"{where}.decoding: set samples >= 1 or greedy: true")
    if dec.samples and dec.temperature <= 0:
        raise ConfigError(f"{where}.decoding.temperature must be > 0 for sampling (got {dec.temperature}); "
                          "use greedy: true, samples: 0 for argmax decoding")
    if not 0 < dec.top_p <= 1:
        raise ConfigError(f"{where}.decoding.top_p must be in (0, 1] (got {dec.top_p})")
    if dec.max_new_tokens < 1:
        raise ConfigError(f"{where}.decoding.max_new_tokens must be >= 1 (got {dec.max_new_tokens})")
    if not (src.local or src.hub or src.generator):
        raise ConfigError(f"{where}.source: give a local path, a hub dataset or a generator")
    if src.generator and not raw.get("profile"):
        raise ConfigError(f"{where}: a generated suite (source.generator) names the profile that serves its items; "
                          "add profile: <name>")
    if "{problem}" not in str(raw["prompt"]):
        raise ConfigError(f"{where}.prompt must contain {{problem}}")
    modality = raw.get("modality") or "text"
    if modality not in MODALITIES:
        raise ConfigError(f"{where}.modality must be one of {', '.join(MODALITIES)} (got {modality!r})")
    if modality == "image" and not (src.local or src.generator):
        raise ConfigError(f"{where}.source.local is required for modality: image (its folder holds the images, e.g. "
                          "local: mathvision/test.jsonl with mathvision/images/)")
    template = raw.get("choices_template")
    if template is not None and (not isinstance(template, str) or "{options}" not in template):
        raise ConfigError(f"{where}.choices_template must be a string containing {{options}} (got {template!r}); "
                          "leave it out when the problem text lists the options")
    fields_ = raw.get("record_fields") or ()
    if isinstance(fields_, str) or not all(isinstance(f, str) and f for f in fields_):
        raise ConfigError(f"{where}.record_fields must be a list of field names (got {fields_!r})")
    if raw.get("ask_as_trained") and not (src.generator and raw.get("profile")):
        raise ConfigError(f"{where}.ask_as_trained: only a profile's generated suite (source.generator, profile) can be "
                          "asked as its agents are trained (their items are training problems); remove the field")
    if "we-math" in metrics and not {"we_math_id", "key"} <= set(fields_):
        raise ConfigError(f"{where}.metrics: we-math groups rows by we_math_id and key; add record_fields: "
                          "[we_math_id, key]")
    return BenchmarkSpec(
        name=str(raw["name"]), version=str(raw["version"]), task=raw["task"], source=src, prompt=str(raw["prompt"]),
        extractor=extractor, grader=grader, decoding=dec, metrics=metrics,
        chat_template=bool(raw.get("chat_template", False)), system=raw.get("system"),
        fewshot=int(raw.get("fewshot", 0) or 0), profile=raw.get("profile"), notes=str(raw.get("notes", "")),
        modality=modality, choices_template=template, record_fields=tuple(fields_),
        response_prefix=str(raw.get("response_prefix") or ""), ask_as_trained=bool(raw.get("ask_as_trained", False)))


def _registered(registry: Any, name: Any, where: str) -> str:
    """The registered name ``name`` resolves to; a one-line ConfigError (the registry's: valid names, "did you
    mean") naming the field otherwise."""
    from corl_bench.registries import RegistryError

    try:
        return registry.primary(str(name))
    except RegistryError as e:
        raise ConfigError(f"{where}: {e}") from None


def _converter(src: Source, where: str) -> Source:
    """``src`` with its converter resolved to the registered name; refused in one line when the hub dataset it reads
    is claimed by a converter (:attr:`corl_bench.eval.converters.Converter.hub_paths`) other than the one it names."""
    import dataclasses

    from corl_bench.registries import CONVERTERS, RegistryError

    if src.converter is not None:
        src = dataclasses.replace(src, converter=_registered(CONVERTERS, src.converter, f"{where}.converter"))
    path = (src.hub or {}).get("path") if isinstance(src.hub, Mapping) else None
    if not path:
        return src
    claimed = []
    for name in CONVERTERS.names():
        try:
            conv = CONVERTERS.get(name)
        except RegistryError as e:  # a broken plugin converter must not stop every other spec from loading
            log.warning("%s", e)
            continue
        if path in (getattr(conv, "hub_paths", None) or ()):
            claimed.append(name)
    if claimed and (src.converter or "columns") not in claimed:
        raise ConfigError(f"{where}.converter: the hub dataset {path} needs the {claimed[0]} converter (got "
                          f"{src.converter or 'none'}); add converter: {claimed[0]} under source")
    return src


def spec_from_yaml(origin: str, text: str) -> BenchmarkSpec:
    """Parse one spec file's text (``origin`` names it in errors): a one-line ConfigError for bad YAML or a bad
    field."""
    import yaml

    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f" (line {mark.line + 1})" if mark is not None else ""
        raise ConfigError(f"{origin} is not valid YAML{line}; fix its syntax") from None
    return parse_spec(raw, origin=origin)


def get_spec(name: str) -> BenchmarkSpec:
    """The registered spec ``name`` (``benchmarks/<name>.yaml``), parsed and validated when the registry loaded."""
    from corl_bench.registries import BENCHMARKS, RegistryError

    try:
        return BENCHMARKS.get(name)
    except RegistryError as e:
        raise ConfigError(str(e)) from None
