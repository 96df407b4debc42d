"""The documentation site: it builds with ``mkdocs build --strict``, its generated reference covers every config key,
CLI command and option and registered name, ``corl-bench config`` answers from the same source, the example config
validates, and the docs' runnable shell blocks run.

Runnable blocks: a fenced ``bash`` block whose line just above is ``<!-- runnable -->`` (``<!-- runnable slow -->``:
only among the ``slow`` tests) in README.md or docs/**/*.md runs as one ``bash -euo pipefail`` script, in a temporary
folder where the repository's configs, sweeps, benchmarks, baselines and trainers are linked, with a ``corl-bench``
first on PATH that runs this checkout's code (``python -m corl_bench`` with the repository root on PYTHONPATH: an
installed entry point may belong to another checkout). A failure names the file, the line and the command.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib.util
import inspect
import os
import re
import shutil
import subprocess
import sys
import typing
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
LINKED = ("configs", "sweeps", "benchmarks", "baselines", "trainers")
MARKER = re.compile(r"^<!--\s*runnable(?P<slow>\s+slow)?\s*-->\s*$")
FAST_TIMEOUT = 300  # seconds per fast block (ls, config, validate: seconds each; generous for a loaded 2-core CPU)
SLOW_TIMEOUT = 3600  # the one block that trains (the README's smoke run)
EXAMPLE = REPO / "configs" / "examples" / "small.yaml"


# ------------------------------------------------------------------------------------------- runnable blocks
@dataclass(frozen=True)
class Block:
    file: str  # relative to the repository
    line: int  # of the opening fence
    slow: bool
    commands: tuple[tuple[int, str], ...]  # (line, command); continuation lines joined


def doc_files(root: Path = REPO) -> list[Path]:
    return [p for p in [root / "README.md", *sorted((root / "docs").rglob("*.md"))] if p.is_file()]


def parse_blocks(path: Path, root: Path = REPO) -> tuple[list[Block], list[str]]:
    """(runnable blocks, problems): a marker not followed by a ```bash fence, or a fence never closed, is a problem."""
    lines = path.read_text(encoding="utf-8").splitlines()
    rel = str(path.relative_to(root))
    blocks, problems = [], []
    for i, line in enumerate(lines):
        m = MARKER.match(line.strip())
        if not m:
            continue
        if i + 1 >= len(lines) or lines[i + 1].strip() != "```bash":
            problems.append(f"{rel}:{i + 1}: {line.strip()} must be followed directly by a ```bash fence")
            continue
        commands: list[tuple[int, str]] = []
        pending: tuple[int, str] | None = None
        for j in range(i + 2, len(lines)):
            text = lines[j]
            if text.strip().startswith("```"):
                break
            if pending is not None:
                pending = (pending[0], pending[1] + "\n" + text)
            elif text.strip() and not text.strip().startswith("#"):
                pending = (j + 1, text)
            if pending is not None and not pending[1].endswith("\\"):
                commands.append(pending)
                pending = None
        else:
            problems.append(f"{rel}:{i + 2}: the runnable block is never closed")
            continue
        blocks.append(Block(rel, i + 2, bool(m.group("slow")), tuple(commands)))
    return blocks, problems


def collect(root: Path = REPO) -> tuple[list[Block], list[str]]:
    blocks, problems = [], []
    for path in doc_files(root):
        b, p = parse_blocks(path, root)
        blocks += b
        problems += p
    return blocks, problems


def workdir(tmp: Path, root: Path = REPO) -> tuple[Path, dict[str, str]]:
    """A working folder with the repository's data folders linked, and the environment the blocks run in."""
    work, shim = tmp / "work", tmp / "bin"
    work.mkdir(parents=True)
    shim.mkdir()
    for name in LINKED:
        if (root / name).exists():
            (work / name).symlink_to(root / name)
    cli = shim / "corl-bench"
    path = "" if _installed_is(root) else f'PYTHONPATH="{root}${{PYTHONPATH:+:$PYTHONPATH}}" '
    cli.write_text(f'#!/bin/sh\n{path}exec "{sys.executable}" -m corl_bench "$@"\n', encoding="utf-8")
    cli.chmod(0o755)
    env = {**os.environ, "PATH": os.pathsep.join([str(shim), str(Path(sys.executable).parent),
                                                  os.environ.get("PATH", "")]),
           "NO_COLOR": "1", "COLUMNS": "200"}
    return work, env


@functools.lru_cache(maxsize=None)
def _installed_is(root: Path) -> bool:
    """Whether this interpreter imports ``root``'s corl_bench from outside the checkout (an editable install of it):
    then the shim needs no PYTHONPATH, which would hide the trainers/baselines/benchmarks packages of a
    non-editable install."""
    proc = subprocess.run([sys.executable, "-c", "import corl_bench; print(corl_bench.__file__)"], cwd=root.anchor,
                          env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, capture_output=True,
                          text=True, timeout=120)
    return proc.returncode == 0 and Path(proc.stdout.strip()).resolve().parent == (root / "corl_bench").resolve()


def run_block(block: Block, work: Path, env: dict[str, str], timeout: int) -> str | None:
    """Run ``block``'s commands in order as one ``bash -euo pipefail`` script; None, or what failed and its output."""
    step = work.parent / "step"
    script = ["set -euo pipefail"]
    for n, (_, command) in enumerate(block.commands):
        script += [f"printf '%s' {n} > '{step}'", command]
    try:
        proc = subprocess.run(["bash", "-c", "\n".join(script)], cwd=work, env=env, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired as e:
        return f"{block.file}:{block.line}: the block ran past {timeout} s\n{e.stdout or ''}{e.stderr or ''}"
    if proc.returncode == 0:
        return None
    n = int(step.read_text()) if step.is_file() and step.read_text().strip() else 0
    line, command = block.commands[n]
    tail = (proc.stdout[-3000:] + "\n" + proc.stderr[-3000:]).strip()
    return f"{block.file}:{line}: `{command}` failed (exit {proc.returncode})\n{tail}"


BLOCKS, PROBLEMS = collect()


def test_runnable_markers_are_well_formed() -> None:
    assert PROBLEMS == []


def test_the_docs_have_runnable_blocks_and_at_most_one_slow_one() -> None:
    assert [b for b in BLOCKS if not b.slow], "no <!-- runnable --> block in README.md or docs/: nothing is checked"
    slow = [f"{b.file}:{b.line}" for b in BLOCKS if b.slow]
    assert len(slow) <= 1, f"one <!-- runnable slow --> block at most (the README's smoke run); found {slow}"


@pytest.mark.skipif(shutil.which("bash") is None, reason="runnable blocks are bash scripts; bash is not installed")
@pytest.mark.parametrize("block", [b for b in BLOCKS if not b.slow], ids=lambda b: f"{b.file}:{b.line}")
def test_runnable_block(block: Block, tmp_path: Path) -> None:
    work, env = workdir(tmp_path)
    failure = run_block(block, work, env, FAST_TIMEOUT)
    assert failure is None, failure


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bash") is None, reason="runnable blocks are bash scripts; bash is not installed")
def test_runnable_slow_block(tmp_path: Path) -> None:
    slow = [b for b in BLOCKS if b.slow]
    if not slow:
        pytest.skip("no <!-- runnable slow --> block in README.md or docs/ (the README's smoke run would be one)")
    for n, block in enumerate(slow):
        work, env = workdir(tmp_path / str(n))
        failure = run_block(block, work, env, SLOW_TIMEOUT)
        assert failure is None, failure


@pytest.mark.skipif(shutil.which("bash") is None, reason="runnable blocks are bash scripts; bash is not installed")
def test_a_failing_block_names_its_file_line_and_command(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    (root / "configs").mkdir()
    (root / "docs" / "page.md").write_text(
        "# A page\n\n<!-- runnable -->\n```bash\n# a comment is skipped\nls configs\n"
        "echo one \\\n  two > joined.txt\nfalse\ntouch never-run\n```\n\n<!-- runnable slow -->\n```bash\ntrue\n```\n"
        "<!-- runnable -->\ntext that is no fence\n", encoding="utf-8")
    blocks, problems = collect(root)
    assert problems == ["docs/page.md:17: <!-- runnable --> must be followed directly by a ```bash fence"]
    assert [(b.line, b.slow) for b in blocks] == [(4, False), (14, True)]
    assert [line for line, _ in blocks[0].commands] == [6, 7, 9, 10]
    work, env = workdir(tmp_path, root)
    failure = run_block(blocks[0], work, env, 60)
    assert failure is not None and failure.startswith("docs/page.md:9: `false` failed (exit 1)")
    assert (work / "joined.txt").read_text() == "one two\n"  # the continued line ran as one command
    assert not (work / "never-run").exists()  # nothing after the failing command runs
    assert run_block(blocks[1], work, env, 60) is None


# ------------------------------------------------------------------------------------------- the site
def test_the_site_builds_strict(tmp_path: Path) -> None:
    for module in ("mkdocs", "material"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed: pip install -c constraints-cpu.txt -e '.[test]' (it pins mkdocs "
                        "and mkdocs-material)")
    site = tmp_path / "site"
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)], cwd=REPO,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}{proc.stderr}"
    from corl_bench.docref_registries import KIND_PAGES

    for page in ("reference/config", "reference/cli", *(p.removesuffix(".md") for p in KIND_PAGES.values())):
        assert (site / page / "index.html").is_file(), f"{page} was not generated"
    assert 'id="grpo.lr"' in (site / "reference" / "config" / "index.html").read_text(encoding="utf-8")
    assert not (site / "hooks.py").exists()  # the build hook is not published


def test_the_generated_pages_are_not_committed() -> None:
    from corl_bench.docref_registries import KIND_PAGES

    written = [p for p in ("reference/config.md", "reference/cli.md", *KIND_PAGES.values()) if (REPO / "docs" / p).exists()]
    assert written == [], f"generated at build time by docs/hooks.py; delete {written}"


# ------------------------------------------------------------------------------------------- the reference
def test_every_config_field_has_a_docstring() -> None:
    from corl_bench.docref import undocumented_keys

    assert undocumented_keys() == [], "write a docstring under each of these fields in corl_bench/config.py"


def _dotted(data: dict, prefix: str = "") -> list[str]:
    return [f"{prefix}{k}" for k in data] if prefix else [f"{s}.{k}" for s, body in data.items() for k in body]


def test_every_method_option_has_a_docstring() -> None:
    """Every field of a method's options dataclass (``class ...Options`` in trainers/, baselines/ and the debate
    options they share) has a docstring under it: the Methods page shows it as the option's meaning. Read from this
    checkout's files with :mod:`ast` (an editable install may import another checkout's trainers/baselines)."""
    files = [*sorted((REPO / "trainers").glob("*.py")), *sorted((REPO / "baselines").glob("*.py")),
             REPO / "corl_bench" / "debate.py"]
    missing, seen = [], 0
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.ClassDef) and node.name.endswith("Options")):
                continue
            body = node.body
            for field, after in zip(body, [*body[1:], None]):
                if isinstance(field, ast.AnnAssign) and isinstance(field.target, ast.Name):
                    seen += 1
                    if not (isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                            and isinstance(after.value.value, str)):
                        missing.append(f"{path.relative_to(REPO)}:{field.lineno}: {node.name}.{field.target.id}")
    assert seen > 10
    assert missing == [], "write a docstring under each of these options"


def test_the_config_page_has_every_key_of_a_default_config() -> None:
    from corl_bench.config import AgentSpec, Config
    from corl_bench.docref import config_page

    page = config_page()
    keys = _dotted(Config().to_dict()) + [f"cohort.agents.{f.name}" for f in dataclasses.fields(AgentSpec)]
    missing = [k for k in keys if f"{{ #{k} }}" not in page]
    assert missing == []


def _typer_commands() -> list[tuple[str, list[str]]]:
    """(command path, option names; hidden aliases left out) of every command, read from the typer app's registrations (not its click tree)."""
    from corl_bench import cli

    def walk(app, prefix: str) -> list[tuple[str, list[str]]]:
        out = []
        for info in app.registered_commands:
            name = info.name or info.callback.__name__.replace("_", "-")
            hints = typing.get_type_hints(info.callback, include_extras=True)  # Annotated[..., typer.Option(...)]
            opts = [d for p in inspect.signature(info.callback).parameters.values()
                    for spec in (p.default, *getattr(hints.get(p.name), "__metadata__", ()))
                    if not getattr(spec, "hidden", False)  # a deprecated alias is not documented
                    for d in getattr(spec, "param_decls", None) or () if d.startswith("-")]
            out.append((f"{prefix} {name}", opts))
        for group in app.registered_groups:
            out += walk(group.typer_instance, f"{prefix} {group.name}")
        return out

    return walk(cli.app, "corl-bench")


def test_the_cli_page_has_every_command_and_option() -> None:
    import typer

    from corl_bench.cli import app
    from corl_bench.docref import cli_page

    page = cli_page(typer.main.get_command(app))
    commands = _typer_commands()
    assert len(commands) >= 10
    missing = [path for path, _ in commands if f"## `{path}` {{ #{path.replace(' ', '-')} }}" not in page]
    for path, opts in commands:
        section = page.split(f"## `{path}` ", 1)[-1].split("\n## ", 1)[0]
        missing += [f"{path} {opt}" for opt in opts
                    if not re.search(rf"^- `[^`]*(?<![\w-]){re.escape(opt)}(?![\w-])", section, re.MULTILINE)]
    assert missing == []


@pytest.mark.parametrize("kind", ["methods", "benchmarks", "cohorts", "profiles", "engines", "families"])
def test_each_registry_page_has_every_registered_name(kind: str) -> None:
    from corl_bench import registries
    from corl_bench.docref_registries import KIND_PAGES, PAGES

    page = PAGES[KIND_PAGES[kind]]()
    names = getattr(registries, kind.upper()).names()
    assert names
    missing = [n for n in names if f"{{ #{n} }}" not in page and f'<a id="{n}"></a>' not in page]
    assert missing == []


def test_method_pages_carry_what_the_class_declares() -> None:
    from corl_bench.docref_registries import methods_page
    from corl_bench.method import NoOptions
    from corl_bench.registries import METHODS

    page = methods_page()
    for name, cls in METHODS.items():
        section = page.split(f"## `{name}` {{ #{name} }}", 1)[1].split("\n## ", 1)[0]
        assert cls.__doc__.split("\n\n")[0].split()[0] in section, name
        if cls.Options is not NoOptions:
            assert all(f"`method.options.{f.name}`" in section for f in dataclasses.fields(cls.Options)), name


def test_the_reference_is_generated_without_torch() -> None:
    code = ("import sys; from corl_bench.docref import config_page, describe; "
            "from corl_bench.docref_registries import pages; config_page(); describe('grpo'); pages(); "
            "assert 'torch' not in sys.modules, 'torch was imported'; print('ok')")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr


def test_markdown_of_docstrings_is_escaped() -> None:
    from corl_bench.docref import md

    assert md("think in <think>, a_b | c, ``x<y>``") == r"think in &lt;think&gt;, a\_b \| c, ``x<y>``"


# ------------------------------------------------------------------------------------------- corl-bench config
def _config_cli(*args: str):
    from typer.testing import CliRunner

    from corl_bench.cli import app

    return CliRunner().invoke(app, ["config", *args], env={"COLUMNS": "200", "NO_COLOR": "1"})


def test_config_command_prints_one_key() -> None:
    from corl_bench.config import GRPOConfig
    from corl_bench.docref import attribute_docs, value_text

    res = _config_cli("grpo.lr")
    assert res.exit_code == 0, res.output
    first = res.output.splitlines()[0]
    assert first == f"grpo.lr  (float, default {value_text(GRPOConfig().lr)})"
    assert " ".join(res.output.split()[4:]) == attribute_docs(GRPOConfig)["lr"]


def test_config_command_lists_a_section_and_the_sections() -> None:
    from corl_bench.config import MonitorConfig
    from corl_bench.docref import sections

    res = _config_cli("monitor")
    assert res.exit_code == 0, res.output
    assert [ln.split()[0] for ln in res.output.splitlines() if ln.startswith("monitor.")] == [
        f"monitor.{f.name}" for f in dataclasses.fields(MonitorConfig)]
    res = _config_cli()
    assert res.exit_code == 0, res.output
    assert [ln.split()[0] for ln in res.output.splitlines()[1:]] == list(sections())


def test_config_command_names_a_moved_key_and_refuses_an_unknown_one() -> None:
    res = _config_cli("grpo.micro_batch")
    assert res.exit_code == 0 and "moved to memory.micro_batch" in res.output, res.output
    res = _config_cli("grpo.lrr")
    assert res.exit_code == 2
    assert len(res.output.strip().splitlines()) == 1 and "did you mean 'grpo.lr'?" in res.output, res.output


# ------------------------------------------------------------------------------------------- the example config
def test_the_example_config_validates() -> None:
    from corl_bench.config import load_config
    from corl_bench.train.runner import resolve

    plan = resolve(load_config(EXAMPLE))
    assert plan.config.method.name == "corl" and len(plan.config.cohort.agents) == 2


def test_every_key_of_the_example_config_exists_and_is_commented() -> None:
    from corl_bench.docref import config_keys

    data = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    known = {k.key for k in config_keys()}
    assert [k for k in _dotted(data) if k not in known] == []
    leaves = [ln for ln in EXAMPLE.read_text(encoding="utf-8").splitlines()
              if ln.startswith("  ") and not ln.strip().startswith("#")]
    assert len(leaves) == len(_dotted(data))
    assert [ln for ln in leaves if not re.search(r"\S\s+# \S", ln)] == [], "each key gets a one-line comment"
