"""The reference pages of everything registered (methods, benchmarks, cohorts, profiles, engines, families), generated
from the registries of :mod:`corl_bench.registries` when the documentation site is built (``docs/hooks.py``).

Each page lists every registered name, so a method, benchmark or cohort added to the code is documented by the next
build: the class attributes a method declares and its docstring, a benchmark spec's fields and its YAML file's
header comment, a cohort's agents. Profiles and engines are read from their source (:mod:`ast`) without importing
them, so building the site never imports torch.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
from importlib import resources
from pathlib import Path
from typing import Any, Callable

import yaml

from corl_bench import registries
from corl_bench.docref import attribute_docs, code, first_paragraph, md, paragraphs, value_text

#: Reference page (relative to the docs folder) -> the ``corl-bench ls`` kind it lists.
KIND_PAGES = {"methods": "reference/methods.md", "benchmarks": "reference/benchmarks.md",
              "cohorts": "reference/cohorts.md", "profiles": "reference/profiles.md",
              "engines": "reference/engines.md", "families": "reference/families.md"}


# ------------------------------------------------------------------------------------------- helpers
def source_doc(target: str | None) -> tuple[str, str]:
    """(module docstring, docstring of the class or function) of ``"module:attr"``, read from the source file
    without importing the module ('' where there is none)."""
    if not target:
        return "", ""
    module, _, attr = target.partition(":")
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return "", ""
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return "", ""
    node: Any = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    module_doc = ast.get_docstring(node) or ""
    for part in attr.split("."):
        node = next((n for n in getattr(node, "body", []) if getattr(n, "name", None) == part
                     and isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))), None)
        if node is None:
            return module_doc, ""
    return module_doc, ast.get_docstring(node) or ""


def yaml_headers(package: str) -> dict[str, str]:
    """``name:`` of every YAML file shipped in ``package`` -> the comment at the file's top (its provenance and
    protocol; the generic versioning note every benchmark file carries is left out)."""
    out = {}
    for f in sorted(resources.files(package).iterdir(), key=lambda f: f.name):
        if not f.name.endswith(".yaml"):
            continue
        text = f.read_text(encoding="utf-8")
        lines = []
        for line in text.splitlines():
            if not line.startswith("#"):
                break
            if line.startswith("# Versioned:"):
                break
            lines.append(line.lstrip("#").strip())
        data = yaml.safe_load(text)
        if isinstance(data, dict) and data.get("name"):
            out[str(data["name"])] = " ".join(" ".join(lines).split())
    return out


def _intro(title: str, kind: str, text: str) -> list[str]:
    return [f"# {title}", "", f"{text} Generated from the code when the site is built; `corl-bench ls {kind}` "
            "lists the same names in a terminal.", ""]


def _table(columns: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    out = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return [*out, ""]


def _link(name: str) -> str:
    return f"[`{name}`](#{name})"


def _heading(name: str) -> str:
    return f"## `{name}` {{ #{name} }}"


def _options(cls: type) -> list[str]:
    """The fields of a method's options dataclass as a list (``method.options.<name>``)."""
    docs = attribute_docs(cls)
    out = []
    for f in dataclasses.fields(cls):
        default = value_text(f.default) if f.default is not dataclasses.MISSING else (
            value_text(f.default_factory()) if f.default_factory is not dataclasses.MISSING else "required")
        out.append(f"- `method.options.{f.name}` ({code(str(f.type))}, default {code(default)}): "
                   f"{md(docs.get(f.name, '')) or '*(no description)*'}")
    return out


# ------------------------------------------------------------------------------------------- pages
def methods_page() -> str:
    methods = registries.METHODS.items()
    out = _intro("Methods", "methods", "Every registered method: `--method NAME` (or `method.name`) picks one, "
                 "`method.options` sets its own options.")
    out += _table(("method", "kind", "agents", "uses labels", "extra cost"),
                  [(_link(n), c.method_kind(), f"{c.min_agents}+" if c.max_agents is None else
                    f"{c.min_agents}-{c.max_agents}" if c.max_agents != c.min_agents else str(c.min_agents),
                    "yes" if c.uses_labels else "no", md(c.extra_cost)) for n, c in methods])
    for name, cls in methods:
        agents = f"{cls.min_agents}+" if cls.max_agents is None else (
            str(cls.min_agents) if cls.max_agents == cls.min_agents else f"{cls.min_agents} to {cls.max_agents}")
        out += [_heading(name), "", md(first_paragraph(cls.__doc__)), "",
                f"- **Table label:** {md(cls.label or name)} ({cls.method_kind()})",
                f"- **Agents:** {agents}; **uses labels:** {'yes' if cls.uses_labels else 'no'}",
                f"- **Extra cost:** {md(cls.extra_cost)}",
                f"- **Reference:** {md(cls.reference) or '*(none given)*'}",
                f"- **Defined in:** `{cls.__module__}:{cls.__qualname__}`"]
        if cls.auxiliary:
            out.append(f"- **Auxiliary models:** {', '.join(code(a.name) for a in cls.auxiliary)}")
        fields = dataclasses.fields(cls.Options) if dataclasses.is_dataclass(cls.Options) else ()
        if fields:
            out += ["- **Options** (`method.options`):", ""]
            out += ["    " + line for line in _options(cls.Options)]
        else:
            out.append("- **Options:** none")
        out.append("")
    return "\n".join(out)


def _decoding(spec: Any) -> str:
    d = spec.decoding
    parts = (["greedy"] if d.greedy else []) + ([f"{d.samples} sampled (T = {d.temperature}, top-p = {d.top_p})"]
                                                 if d.samples else [])
    stop = f", stop at {', '.join(code(s) for s in d.stop)}" if d.stop else ""
    return f"{' + '.join(parts) or 'none'}, at most {d.max_new_tokens} new tokens{stop}"


def _source(spec: Any) -> str:
    src = spec.source
    parts = []
    if spec.profile:
        size = f" ({src.size} problems, seed {src.seed})" if getattr(src, "size", None) else ""
        parts.append(f"generated by the `{spec.profile}` profile{size}")
    if src.local:
        parts.append(f"local file {code(src.local)} (under `--data-dir` / `$CORL_BENCH_DATA`)")
    if src.hub:
        hub = dict(src.hub)
        where = hub.pop("path", "?")
        parts.append(f"hub {code(str(where))}" + (f" ({md(value_text(hub))})" if hub else ""))
    if src.converter:
        parts.append(f"converter {code(src.converter)}")
    return "; ".join(parts) or "-"


def benchmarks_page() -> str:
    specs = registries.BENCHMARKS.items()
    headers = yaml_headers("corl_bench.benchmarks")
    out = _intro("Benchmarks", "benchmarks", "Every registered benchmark spec (`benchmarks/*.yaml`): "
                 "`eval.benchmarks` of a run, `corl-bench eval --benchmarks`. A spec's `name@version` fixes "
                 "everything that decides a score.")
    out += _table(("benchmark", "version", "task", "k", "extractor / grader"),
                  [(_link(n), md(s.version), s.task + (" + image" if s.modality == "image" else ""),
                    str(s.decoding.samples), f"{s.extractor} / {s.grader}") for n, s in specs])
    for name, spec in specs:
        out += [_heading(name), "", md(headers.get(name, "")), "",
                f"- **Version:** {code(spec.version)}; **task:** {spec.task}; **modality:** {spec.modality}",
                f"- **Decoding:** {_decoding(spec)}",
                f"- **Metrics:** {', '.join(code(m) for m in spec.metrics)}",
                f"- **Answer:** extractor [{code(spec.extractor)}](#extractor-{spec.extractor}), grader "
                f"[{code(spec.grader)}](#grader-{spec.grader})",
                f"- **Data:** {_source(spec)}"]
        if spec.notes:
            out.append(f"- **Notes:** {md(paragraphs(spec.notes))}")
        how = ", ".join(filter(None, ["in the model's chat template" if spec.chat_template else "",
                                      f"after {spec.fewshot} worked examples" if spec.fewshot else ""]))
        fence = "````" if "```" in spec.prompt else "```"
        out += ["", f"Prompt{f' ({how})' if how else ''}:", "", f"{fence}text", spec.prompt, fence, ""]
    for title, reg, prefix in (("Answer extractors", registries.EXTRACTORS, "extractor"),
                               ("Graders", registries.GRADERS, "grader"),
                               ("Data converters", registries.CONVERTERS, "converter")):
        out += [f"## {title}", "", f"The registered {reg.kind}s (a spec names one; plugins add theirs through "
                f"the `corl_bench.{prefix}s` entry-point group).", ""]
        for name in reg.names():
            target = reg.target(name)
            doc = first_paragraph(source_doc(target)[1])
            out += [f"### `{name}` {{ #{prefix}-{name} }}", "", f"`{target}`" + (f": {md(doc)}" if doc else ""), ""]
    return "\n".join(out)


def cohorts_page() -> str:
    cohorts = registries.COHORTS.items()
    headers = yaml_headers("corl_bench.cohorts")
    documented = {*registries.FAMILIES.names(), *_model_entries()}  # the families page's anchors
    out = _intro("Cohorts", "cohorts", "Every registered cohort: the agents that train together (`--cohort NAME` "
                 "or `cohort.name`; in ring order: Co-RL's agent n learns from agent n-1). Cohort files live in "
                 "`corl_bench/cohorts/` and in the folders of `$CORL_BENCH_COHORTS`.")
    out += _table(("cohort", "profile", "agents", "description"),
                  [(_link(n), c.profile or "-", str(len(c.agents)), md(c.description)) for n, c in cohorts])
    for name, cohort in cohorts:
        out += [_heading(name), ""]
        if headers.get(name):
            out += [md(headers[name]), ""]
        out += [f"- **Profile:** [`{cohort.profile}`](profiles.md#{cohort.profile})" if cohort.profile else
                "- **Profile:** the config's", f"- **Description:** {md(cohort.description) or '-'}"]
        if cohort.paper_row:
            out.append(f"- **Paper row:** {cohort.paper_row}")
        out += ["- **Agents** (ring order):", ""]
        for a in cohort.agents:
            extra = [code(f"{f.name}: {value_text(getattr(a, f.name))}") for f in dataclasses.fields(a)
                     if f.name not in ("name", "family") and getattr(a, f.name) != _agent_default(f)]
            family = f"[`{a.family}`](families.md#{a.family})" if a.family in documented else code(a.family)
            out.append(f"    - `{a.name}`: family {family}" + (f"; {', '.join(extra)}" if extra else ""))
        out.append("")
    return "\n".join(out)


def _agent_default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def _class_section(name: str, target: str | None) -> list[str]:
    module_doc, class_doc = source_doc(target)
    out = [_heading(name), "", f"`{target}`", ""]
    if class_doc:
        out += [md(paragraphs(class_doc)), ""]
    if first_paragraph(module_doc):
        out += [f"From its module: {md(first_paragraph(module_doc))}", ""]
    return out


def profiles_page() -> str:
    reg = registries.PROFILES
    out = _intro("Profiles", "profiles", "Every registered profile (`model.profile`): where a run's models, training "
                 "problems and benchmarks come from. A registered cohort names its profile.")
    cohorts = registries.COHORTS.items()
    families = registries.FAMILIES.items()
    for name in reg.names():
        out += _class_section(name, reg.target(name))
        own_cohorts = [c for c, spec in cohorts if spec.profile == name]
        own_families = [f for f, fam in families if getattr(fam, "profile", None) == name]
        if own_families:
            out.append("- **Families:** " + ", ".join(f"[`{f}`](families.md#{f})" for f in own_families))
        if own_cohorts:
            out.append("- **Cohorts:** " + ", ".join(f"[`{c}`](cohorts.md#{c})" for c in own_cohorts))
        out.append("")
    return "\n".join(out)


def engines_page() -> str:
    reg = registries.ENGINES
    out = _intro("Rollout engines", "engines", "Every registered rollout engine (`rollout.backend`; its own "
                 "options go under `rollout.engine_options`).")
    for name in reg.names():
        out += _class_section(name, reg.target(name))
    return "\n".join(out)


def families_page() -> str:
    families = registries.FAMILIES.items()
    out = _intro("Model families", "families", "Every registered model family (`family:` of a cohort agent in a "
                 "profile that builds its models from families).")

    def flaw(fam: Any) -> str:
        return f"{fam.flaw} (p_sys {fam.p_sys})" if hasattr(fam, "flaw") else "-"

    out += _table(("family", "profile", "architecture", "tokenizer", "flaw"),
                  [(_anchor_cell(n), str(getattr(f, "profile", "-")),
                    md(str(getattr(f, "arch", "-"))), md(str(getattr(f, "tokenizer", "-"))), md(flaw(f)))
                   for n, f in families])
    kinds: dict[type, list[str]] = {}
    for n, f in families:
        kinds.setdefault(type(f), []).append(n)
    out += ["## Family types", ""]
    for cls, names in kinds.items():
        module_doc, _ = source_doc(f"{cls.__module__}:{cls.__qualname__}")
        out += [f"### `{cls.__module__}:{cls.__qualname__}`", "", md(first_paragraph(cls.__doc__)), "",
                f"Families: {', '.join(code(n) for n in names)}. From its module: {md(first_paragraph(module_doc))}",
                ""]
    out += ["## Model entries (hf profile)", "",
            "In the `hf` profile an agent's `family` is a model entry below, a `save_pretrained` folder or a "
            "hub id (`owner/name`).", ""]
    for name, entry in _model_entries().items():
        out += [f"### `{name}` {{ #{name} }}", "", md(entry.description), "", f"Install: {code(entry.install)}", ""]
    return "\n".join(out)


def _model_entries() -> dict[str, Any]:
    from corl_bench.models.entries import ENTRIES  # torch-free: the named model entries of the hf profile

    return ENTRIES


def _anchor_cell(name: str) -> str:
    """A table cell that is also the link target ``families.md#name`` (an empty anchor before the name)."""
    return f'<a id="{name}"></a>`{name}`'


#: Page (relative to the docs folder) -> the function that writes it.
PAGES: dict[str, Callable[[], str]] = {KIND_PAGES["methods"]: methods_page, KIND_PAGES["benchmarks"]: benchmarks_page,
                                       KIND_PAGES["cohorts"]: cohorts_page, KIND_PAGES["profiles"]: profiles_page,
                                       KIND_PAGES["engines"]: engines_page, KIND_PAGES["families"]: families_page}


def pages() -> dict[str, str]:
    """Every registry page: docs-relative path -> Markdown."""
    return {path: write() for path, write in PAGES.items()}
