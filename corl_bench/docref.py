"""The reference of the configuration and the CLI, generated from the code (never written by hand).

Every config key is a field of a section dataclass of :mod:`corl_bench.config`; its meaning is the field's attribute
docstring (the string literal under it), read from the source with :mod:`ast`. :func:`config_keys` lists them,
:func:`describe` answers ``corl-bench config [KEY_OR_SECTION]``, :func:`config_page` and :func:`cli_page` write the
Markdown pages of the documentation site (``docs/hooks.py`` calls them at build time;
:mod:`corl_bench.docref_registries` writes the registered methods, benchmarks, ...). Torch-free.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import inspect
import re
import textwrap
from dataclasses import dataclass, fields
from pathlib import PurePath
from typing import Any, Mapping

from corl_bench import config as config_mod
from corl_bench.errors import ConfigError

#: Where the agent entries of ``cohort.agents`` are documented (``cohort.agents.<field>`` in lookups).
AGENT_PREFIX = "cohort.agents"


# ------------------------------------------------------------------------------------------- source reading
def attribute_docs(cls: type) -> dict[str, str]:
    """Field name -> the attribute docstring under it (cleaned, paragraphs kept), for ``cls`` and its bases
    (a subclass's docstring wins); a field without one is absent."""
    out: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass is object or klass.__module__ == "builtins":
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError, SyntaxError):  # no source (a builtin, an interactive class)
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for node, after in zip(body, body[1:]):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(after, ast.Expr)
                    and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):
                out[node.target.id] = paragraphs(after.value.value)
    return out


def paragraphs(doc: str) -> str:
    """A docstring as prose: cleaned indentation, each paragraph's lines joined into one line."""
    blocks = re.split(r"\n\s*\n", inspect.cleandoc(doc))
    return "\n\n".join(" ".join(block.split()) for block in blocks if block.strip())


def first_paragraph(doc: str | None) -> str:
    """The first paragraph of a docstring ('' for none)."""
    return paragraphs(doc or "").split("\n\n")[0]


def section_summaries() -> dict[str, str]:
    """Section -> its one-line summary, from the list in :mod:`corl_bench.config`'s module docstring."""
    found = re.findall(r"^\s+(\w+):\s+(.+)$", config_mod.__doc__ or "", flags=re.MULTILINE)
    return {name: text.strip() for name, text in found}


# ------------------------------------------------------------------------------------------- values as text
ROLES = re.compile(r":(?:data|mod|class|func|meth|attr|obj|exc):`~?([^`]+)`")
CODE = re.compile(r"(``.+?``|`[^`]+`)")


def value_text(value: Any) -> str:
    """A default as it is written in YAML: ``true``, ``null``, ``""``, ``[a, b]``, ``{}``, ``5e-05``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, str):
        return value if value else '""'
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, (tuple, list, frozenset, set)):
        return "[" + ", ".join(value_text(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {value_text(v)}" for k, v in value.items()) + "}"
    return repr(value)


def plain(text: str) -> str:
    """Docstring prose for a terminal: RST roles and double backticks become single backticks."""
    return ROLES.sub(r"`\1`", text).replace("``", "`")


def md(text: str) -> str:
    """Docstring prose as Markdown: RST roles become code spans; outside code spans, characters Markdown would read
    as markup (emphasis, HTML tags, links, table pipes) are escaped."""
    out = []
    for part in CODE.split(ROLES.sub(r"``\1``", text)):
        if CODE.fullmatch(part):
            out.append(part)
        else:
            escaped = re.sub(r"([\\`*_\[\]|#])", r"\\\1", part)
            out.append(escaped.replace("<", "&lt;").replace(">", "&gt;"))
    return "".join(out)


def code(text: str) -> str:
    """``text`` as one Markdown code span (a longer fence where it holds backticks; a newline shown as ``\\n``)."""
    text = text.replace("\n", "\\n")
    fence = "``" if "`" in text else "`"
    return f"{fence} {text} {fence}" if fence == "``" else f"`{text}`"


# ------------------------------------------------------------------------------------------- config keys
@dataclass(frozen=True)
class KeyDoc:
    """One config key: ``section.field`` (``cohort.agents.<field>`` for an agent entry's field)."""

    key: str
    type: str
    default: str  # as written in YAML; "required" for an agent entry's name and family
    meaning: str  # the attribute docstring ('' where it has none)


def sections() -> dict[str, type]:
    """Config section -> its dataclass, in the order of :class:`corl_bench.config.Config`."""
    out = {}
    for f in fields(config_mod.Config):
        if f.name != "set_keys":
            out[f.name] = f.default_factory  # type: ignore[assignment]  (every section is a default_factory)
    return out


def _field_default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        return value_text(f.default)
    if f.default_factory is not dataclasses.MISSING:
        return value_text(f.default_factory())
    return "required"


def _keys_of(cls: type, prefix: str) -> list[KeyDoc]:
    docs = attribute_docs(cls)
    return [KeyDoc(f"{prefix}.{f.name}", str(f.type), _field_default(f), docs.get(f.name, "")) for f in fields(cls)]


def config_keys(agents: bool = True) -> list[KeyDoc]:
    """Every config key in section order; with ``agents``, the fields of a ``cohort.agents`` entry after cohort's."""
    out: list[KeyDoc] = []
    for name, cls in sections().items():
        out += _keys_of(cls, name)
        if agents and name == "cohort":
            out += _keys_of(config_mod.AgentSpec, AGENT_PREFIX)
    return out


def undocumented_keys() -> list[str]:
    """The keys whose field has no attribute docstring (the reference would show them without a meaning)."""
    return [k.key for k in config_keys() if not k.meaning]


def _lookup(query: str) -> tuple[str, list[KeyDoc]]:
    """(title, keys) of a section or one key; a one-line ConfigError with a "did you mean" otherwise."""
    q = query.strip().lower().replace("-", "_")
    keys = config_keys()
    by_key = {k.key: k for k in keys}
    secs = sections()
    if q in secs:
        return q, [k for k in keys if k.key.split(".")[0] == q]
    if q == AGENT_PREFIX:
        return q, [by_key[q], *(k for k in keys if k.key.startswith(AGENT_PREFIX + "."))]
    if q in by_key:
        return q, [by_key[q]]
    section, _, name = q.partition(".")
    if section == "grpo" and name in config_mod.MOVED_TO_MEMORY:
        return f"{q} (moved to memory.{name}; grpo.{name} is still read as memory.{name})", [by_key[f"memory.{name}"]]
    same_name = [k for k in by_key if k.rsplit(".", 1)[-1] == (name or q)]  # a key name under another section
    close = same_name[:1] or difflib.get_close_matches(q, [*secs, *by_key], n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise ConfigError(f"unknown config key or section {query!r}; {hint}sections: {', '.join(secs)} "
                      "(corl-bench config SECTION lists its keys)")


def _wrap(text: str, indent: str = "    ", width: int = 100) -> str:
    return "\n\n".join(textwrap.fill(p, width, initial_indent=indent, subsequent_indent=indent)
                       for p in plain(text).split("\n\n"))


def describe(query: str | None = None) -> str:
    """What ``corl-bench config [QUERY]`` prints: the sections (no query), every key of a section, or one key
    with its type, default and meaning."""
    summaries = section_summaries()
    if query is None or not query.strip():
        width = max(map(len, sections()))
        rows = [f"{name:<{width}}  {summaries.get(name, '')}" for name in sections()]
        return "\n".join(["config sections (corl-bench config SECTION for its keys, SECTION.KEY for one):", *rows])
    title, keys = _lookup(query)
    lines = []
    if title in summaries:
        lines += [f"{title}: {summaries[title]}", ""]
        cls_doc = inspect.getdoc(sections()[title])
        if cls_doc and not cls_doc.startswith(sections()[title].__name__ + "("):  # not the dataclass signature
            lines += [_wrap(paragraphs(cls_doc), indent=""), ""]
    elif len(keys) == 1 and title != keys[0].key:
        lines += [title, ""]
    for k in keys:
        lines += [f"{k.key}  ({k.type}, default {k.default})", _wrap(k.meaning or "(no description)"), ""]
    return "\n".join(lines).rstrip()


def config_page() -> str:
    """The Markdown page of every config key, section by section, each key an anchor (``config.md#grpo.lr``)."""
    summaries = section_summaries()
    out = ["# Configuration keys", "",
           "Every key of a config file (and of `--set section.key=value`), generated from the config dataclasses "
           "in `corl_bench/config.py` when the site is built: the type, the default and the field's docstring. "
           "`corl-bench config SECTION` and `corl-bench config SECTION.KEY` print the same in a terminal.", "",
           "A YAML file mirrors the nesting:", "", "```yaml", "grpo:", "  lr: 3.0e-5", "rollout:",
           "  samples_per_prompt: 8", "```", ""]
    out += ["| section | what it holds |", "|---|---|"]
    out += [f"| [`{name}`](#{name}) | {md(summaries.get(name, ''))} |" for name in sections()]
    out.append("")
    all_keys = config_keys()
    for name, cls in sections().items():
        out += [f"## `{name}` {{ #{name} }}", "", md(summaries.get(name, "")), ""]
        cls_doc = inspect.getdoc(cls)
        if cls_doc and not cls_doc.startswith(cls.__name__ + "("):
            out += [md(paragraphs(cls_doc)), ""]
        keys = [k for k in all_keys if k.key.split(".")[0] == name]
        for k in keys:
            out += _key_md(k)
            if k.key == AGENT_PREFIX:
                out += ["Each entry of `cohort.agents` (as in a cohort YAML file) takes these keys:", ""]
                out += [line for a in keys if a.key.startswith(AGENT_PREFIX + ".") for line in _key_md(a, level=4)]
    return "\n".join(out)


def _key_md(k: KeyDoc, level: int = 3) -> list[str]:
    if k.key.startswith(AGENT_PREFIX + ".") and level == 3:
        return []  # listed under cohort.agents
    return [f"{'#' * level} `{k.key}` {{ #{k.key} }}", "",
            f"{code(k.type)} · default {code(k.default)}", "", md(k.meaning) or "*(no description)*", ""]


# ------------------------------------------------------------------------------------------- CLI
def _commands(group: Any, ctx: Any) -> list[tuple[Any, Any]]:
    """(command, context) of every command under ``group``, depth first, groups before their commands."""
    out = []
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        if cmd is None or getattr(cmd, "hidden", False):
            continue
        sub = cmd.context_class(cmd, info_name=name, parent=ctx)
        out.append((cmd, sub))
        if hasattr(cmd, "list_commands"):
            out += _commands(cmd, sub)
    return out


def _param_type(param: Any, ctx: Any) -> str:
    """The type a parameter takes: typer's ``<int>``-style label, click's type name, or ``flag``."""
    if getattr(param, "is_flag", False):
        return "flag"
    try:
        label = param.display_type(ctx)  # typer's own click (typer >= 0.2x)
    except (AttributeError, TypeError):
        label = getattr(getattr(param, "type", None), "name", "") or ""
    return str(label).strip("<>") or "text"


def _param_default(param: Any) -> str:
    default = param.default
    if getattr(param, "required", False):
        return "required"
    if getattr(param, "is_flag", False):
        return "off" if not default else "on"
    if default is None or default == [] or default == () or type(default).__name__ in ("Sentinel", "_Missing"):
        return "none"
    return value_text(default)


def command_params(command: Any, ctx: Any) -> list[dict[str, str]]:
    """Every visible parameter of ``command``: names, kind (argument | option), type, default and help."""
    out = []
    for p in command.params:
        if getattr(p, "hidden", False) or p.name == "help":
            continue
        kind = getattr(p, "param_type_name", "option")
        names = p.name.upper() if kind == "argument" else ", ".join([*p.opts, *p.secondary_opts])
        out.append({"names": names, "kind": kind, "type": _param_type(p, ctx), "default": _param_default(p),
                    "help": " ".join((getattr(p, "help", None) or "").split()), "repeatable":
                    "yes" if getattr(p, "multiple", False) or getattr(p, "nargs", 1) == -1 else ""})
    return out


def cli_page(root: Any, prog: str = "corl-bench") -> str:
    """The Markdown page of every command and option of the click/typer command ``root``
    (``typer.main.get_command(corl_bench.cli.app)``), walked at build time."""
    ctx = root.context_class(root, info_name=prog)
    out = ["# Command line", "",
           f"Every `{prog}` command with its arguments and options, generated from the CLI itself "
           f"(`corl_bench/cli.py`) when the site is built. `{prog} COMMAND --help` prints the same in a terminal.",
           "", md(paragraphs(root.help or "")), ""]
    cmds = _commands(root, ctx)
    out += ["| command | what it does |", "|---|---|"]
    out += [f"| [`{c.command_path}`](#{_anchor(c.command_path)}) | {md(first_paragraph(cmd.help))} |"
            for cmd, c in cmds]
    out.append("")
    for cmd, c in cmds:
        usage = " ".join([c.command_path, *cmd.collect_usage_pieces(c)])
        out += [f"## `{c.command_path}` {{ #{_anchor(c.command_path)} }}", "", "```text", usage, "```", "",
                md(paragraphs(cmd.help or "")), ""]
        for p in command_params(cmd, c):
            extra = [f"type {code(p['type'])}", f"default {code(p['default'])}"]
            if p["repeatable"]:
                extra.append("repeatable")
            text = md(p["help"]) or "*(no description)*"
            out.append(f"- {code(p['names'])} ({', '.join(extra)}): {text}")
        out.append("")
    return "\n".join(out)


def _anchor(command_path: str) -> str:
    return command_path.replace(" ", "-")


def cli_command_paths(root: Any, prog: str = "corl-bench") -> list[str]:
    """``corl-bench run``, ``corl-bench data prepare``, ...: every visible command's full name."""
    ctx = root.context_class(root, info_name=prog)
    return [c.command_path for _, c in _commands(root, ctx)]


def pages(cli_root: Any) -> dict[str, str]:
    """The configuration and CLI pages (docs-relative path -> Markdown); ``cli_root``: the CLI's click command."""
    return {"reference/config.md": config_page(), "reference/cli.md": cli_page(cli_root)}
