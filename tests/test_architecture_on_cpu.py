"""The import direction of the packages (issues 13 and 23): training and rollout never import reporting, reporting never
imports training, method files import only the method contract, no two corl_bench modules import each other
(directly or around a longer loop), and the model layer (``corl_bench.models``) sits below every package:
:data:`FORBIDDEN` lists, rule by rule, the package pairs no import may join.

Every module under ``corl_bench/``, ``trainers/`` and ``baselines/`` (installed as ``corl_bench.trainers`` and
``corl_bench.baselines``) is parsed with :mod:`ast`; every import statement counts, at module level or inside a
function (a lazy import still runs in the same process). Nothing is imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: source folder -> the package it installs as (pyproject.toml [tool.setuptools] package-dir)
ROOTS = {"corl_bench": "corl_bench", "trainers": "corl_bench.trainers", "baselines": "corl_bench.baselines"}

#: Import cycles known today, outside reporting, each as the set of modules of one strongly connected component.
#: The lead empties this list; a cycle not listed here (or a listed one that grew) fails the test.
KNOWN_CYCLES: list[frozenset[str]] = []


def _modules() -> dict[str, Path]:
    """module name -> file, for every .py file of the project's packages."""
    out = {}
    for folder, package in ROOTS.items():
        for path in sorted((REPO / folder).rglob("*.py")):
            parts = list(path.relative_to(REPO / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([package, *parts])] = path
    return out


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The project module ``name`` refers to: itself, or the longest known package prefix; None outside it."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in MODULES:
            return candidate
        parts.pop()
    return None


def _imports(module: str) -> set[str]:
    """The project modules ``module`` imports anywhere in its file (module level, functions, classes)."""
    path = MODULES[module]
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base if is_package else base[:-1]
                base = base[:len(base) - (node.level - 1)]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            found.add(origin)
            for alias in node.names:  # ``from corl_bench.report import table`` imports the module table
                found.add(f"{origin}.{alias.name}")
    targets = {_resolve(name) for name in found}
    return {t for t in targets if t is not None and t != module}


GRAPH: dict[str, set[str]] = {m: _imports(m) for m in MODULES}


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _violations(sources: str, forbidden: str) -> list[str]:
    return sorted(f"{m} imports {t}" for m, targets in GRAPH.items() if _in(m, sources)
                  for t in targets if _in(t, forbidden))


def test_the_parser_sees_the_project() -> None:
    assert {"corl_bench.cli", "corl_bench.results", "corl_bench.report.table", "corl_bench.train.runner",
            "corl_bench.trainers.corl", "corl_bench.baselines.ttrl"} <= set(MODULES)
    assert "corl_bench.report.collect" in GRAPH["corl_bench.report.table"]  # module level
    assert "corl_bench.train.runner" in GRAPH["corl_bench.cli"]  # inside a function


@pytest.mark.parametrize("package", ["corl_bench.train", "corl_bench.rollout"])
def test_training_and_rollout_import_nothing_from_reporting(package: str) -> None:
    assert _violations(package, "corl_bench.report") == []


def _reachable(module: str) -> set[str]:
    seen: set[str] = set()
    todo = [module]
    while todo:
        for target in GRAPH[todo.pop()]:
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


@pytest.mark.parametrize("package", ["corl_bench.train", "corl_bench.rollout"])
def test_a_training_run_never_loads_reporting(package: str) -> None:
    """Not even through another module: nothing a training or rollout module imports leads to reporting."""
    bad = sorted(f"{m} reaches {t}" for m in GRAPH if _in(m, package)
                 for t in _reachable(m) if _in(t, "corl_bench.report"))
    assert bad == []


def test_reporting_imports_nothing_from_training() -> None:
    assert _violations("corl_bench.report", "corl_bench.train") == []


@pytest.mark.parametrize("module", ["corl_bench.config", "corl_bench.registries", "corl_bench.results",
                                    "corl_bench.profile", "corl_bench.console"])
def test_the_top_level_never_reaches_training_or_reporting(module: str) -> None:
    """Config, registries, results I/O and the protocols sit below every package (lazy registry entries aside)."""
    bad = sorted(t for t in _reachable(module) if _in(t, "corl_bench.train") or _in(t, "corl_bench.report"))
    assert bad == []


#: (importer, imported): no module of the first package may import a module of the second. Each rule names the
#: wrong-way arrow it forbids (issue 23).
FORBIDDEN: list[tuple[str, str, str]] = [
    ("corl_bench.eval", "corl_bench.train", "evaluation loads models through corl_bench.models, not training"),
    ("corl_bench.eval", "corl_bench.micro", "evaluation reaches a micro family through the registries"),
    ("corl_bench.eval", "corl_bench.hf", "devices and dtypes live in corl_bench.models.device"),
    ("corl_bench.rollout", "corl_bench.train", "LoRA merging for weight sync lives in corl_bench.models.lora"),
    ("corl_bench.method", "corl_bench.train", "the method contract's advantages live in corl_bench.advantages"),
    ("corl_bench.micro", "corl_bench.eval", "the warm start grades with corl_bench.grading"),
    ("corl_bench.micro", "corl_bench.train", "a profile sits below training"),
    ("corl_bench.micro", "corl_bench.hf", "one profile never imports another"),
    ("corl_bench.hf", "corl_bench.train", "a profile sits below training (selection rules: corl_bench.profile)"),
    ("corl_bench.hf", "corl_bench.micro", "one profile never imports another (the cache root: corl_bench.models)"),
    ("corl_bench.report", "corl_bench.micro", "the probe reaches micro suites and models through the registries"),
    ("corl_bench.report", "corl_bench.hf", "reporting never imports a profile"),
    ("corl_bench.report", "corl_bench.train", "reporting reads run directories, never training code"),
    ("corl_bench.grading", "corl_bench.eval", "the verifier sits below evaluation"),
    ("corl_bench.advantages", "corl_bench.train", "the advantage estimators sit below training"),
] + [("corl_bench.models", upper, "the model layer sits below everything")
     for upper in ("corl_bench.eval", "corl_bench.train", "corl_bench.report", "corl_bench.micro", "corl_bench.hf",
                   "corl_bench.rollout", "corl_bench.method", "corl_bench.cli", "corl_bench.grading")]


@pytest.mark.parametrize("sources,forbidden,why", FORBIDDEN, ids=[f"{a}-/->{b}" for a, b, _ in FORBIDDEN])
def test_no_wrong_way_import(sources: str, forbidden: str, why: str) -> None:
    """Every import counts (module level or inside a function); ``why`` says where the thing went instead."""
    assert _violations(sources, forbidden) == [], why


def test_the_model_layer_reaches_no_upper_package() -> None:
    """Not even through another module (registries and config included): loading a model loads no trainer, no
    evaluator, no report and no profile module."""
    upper = ("corl_bench.eval", "corl_bench.train", "corl_bench.report", "corl_bench.micro", "corl_bench.hf",
             "corl_bench.rollout")
    bad = sorted(f"{m} reaches {t}" for m in GRAPH if _in(m, "corl_bench.models")
                 for t in _reachable(m) if any(_in(t, u) for u in upper))
    assert bad == []


def test_the_model_layer_exists() -> None:
    assert {"corl_bench.models.load", "corl_bench.models.entries", "corl_bench.models.hub",
            "corl_bench.models.device", "corl_bench.grading.verifier", "corl_bench.advantages"} <= set(MODULES)


def test_reporting_layers_point_one_way() -> None:
    """collect <- layout <- render <- table: the table stack has no upward import."""
    order = ["corl_bench.report.collect", "corl_bench.report.methods", "corl_bench.report.layout",
             "corl_bench.report.render", "corl_bench.report.table"]
    for i, module in enumerate(order):
        upward = GRAPH[module] & set(order[i + 1:])
        assert not upward, f"{module} imports {sorted(upward)}"


def test_methods_import_only_the_method_contract() -> None:
    allowed = ("corl_bench.method", "corl_bench.trainers", "corl_bench.baselines")
    bad = sorted(f"{m} imports {t}" for m, targets in GRAPH.items()
                 if _in(m, "corl_bench.trainers") or _in(m, "corl_bench.baselines")
                 for t in targets if not any(_in(t, a) for a in allowed) and t != "corl_bench")
    assert bad == []


def _cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[frozenset[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        out.append(frozenset(component))
    return out


def _loop(component: frozenset[str]) -> str:
    """One concrete loop through a component, for the message: a -> b -> ... -> a."""
    start = min(component)
    path, seen = [start], {start}
    while True:
        nxt = sorted(t for t in GRAPH[path[-1]] if t in component)
        back = [t for t in nxt if t == start]
        if back and len(path) > 1:
            return " -> ".join(path + [start])
        fresh = [t for t in nxt if t not in seen]
        if not fresh:
            return " -> ".join(path + [nxt[0]]) if nxt else " -> ".join(path)
        path.append(fresh[0])
        seen.add(fresh[0])


def test_the_cycle_finder_finds_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _cycles(graph) == [frozenset({"a", "b", "c"})]


def test_no_import_cycle() -> None:
    cycles = _cycles(GRAPH)
    in_report = [c for c in cycles if any(_in(m, "corl_bench.report") for m in c)]
    assert not in_report, "import cycles in reporting: " + "; ".join(_loop(c) for c in in_report)
    unknown = [c for c in cycles if c not in KNOWN_CYCLES]
    assert not unknown, "import cycles: " + "; ".join(_loop(c) for c in unknown)


#: Modules that re-export by design: the method contract (a method file imports only it), the rollout package's API,
#: and config (its one-line errors live in corl_bench.errors, its YAML reader in corl_bench.typed_yaml).
FACADES = {"corl_bench.method", "corl_bench.rollout", "corl_bench.config"}


def _borrowed(module: str) -> set[str]:
    """The names ``module`` takes at module level from another project module (``from corl_bench.x import y``)."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    return {a.asname or a.name for node in tree.body if isinstance(node, ast.ImportFrom) and not node.level
            and (node.module or "").startswith("corl_bench") for a in node.names}


def test_every_name_has_one_import_path() -> None:
    """No re-export shims (issue 38): a module's ``__all__`` lists only what it defines, and every import names the
    module a name is defined in, not one that merely imports it (the facades in :data:`FACADES` aside)."""
    borrowed = {m: _borrowed(m) for m in MODULES}
    found = []
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if (module not in FACADES and isinstance(node, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)):
                found += [f"{module}.__all__ re-exports {e.value}" for e in node.value.elts
                          if isinstance(e, ast.Constant) and e.value in borrowed[module]]
    files = [p for d in ("corl_bench", "trainers", "baselines", "scripts", "tests") for p in (REPO / d).rglob("*.py")]
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and not node.level and node.module in MODULES \
                    and node.module not in FACADES:
                found += [f"{path.relative_to(REPO)}:{node.lineno}: {a.name} from {node.module}, which imports it"
                          for a in node.names if a.name in borrowed[node.module]]
    assert not found, "\n".join(found)
