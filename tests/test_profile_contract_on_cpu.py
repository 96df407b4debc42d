"""The profile contract is closed (issue 23): every profile subclasses :class:`corl_bench.profile.Profile`, whose
default hooks the core calls unconditionally — no ``getattr``/``hasattr`` probing of a profile, no signature
sniffing, and no profile name inside the core. (A third profile added with zero edits outside its own file:
``tests/test_plugin_engine_profile_on_cpu.py``.)"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from corl_bench.config import ConfigError
from corl_bench.profile import Profile, check_profile_class
from corl_bench.registries import ENGINES, FAMILIES, PROFILES

PKG = Path(__file__).resolve().parents[1] / "corl_bench"
CORE = [*(PKG / d for d in ("train", "eval", "report", "models", "rollout", "grading")),
        PKG / "registries.py", PKG / "cli.py", PKG / "method.py", PKG / "record.py", PKG / "results.py"]
HOOKS = [n for n, v in vars(Profile).items() if not n.startswith("_") and (callable(v) or isinstance(v, classmethod))]


def _files(paths: list[Path]) -> list[Path]:
    return sorted(f for p in paths for f in ([p] if p.is_file() else p.rglob("*.py")))


def _is_register_lazy(node: ast.AST) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "register_lazy"
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "PROFILES")


@pytest.mark.parametrize("name", PROFILES.names())
def test_every_builtin_profile_subclasses_the_base_and_keeps_its_signatures(name: str) -> None:
    cls = PROFILES.get(name)
    assert issubclass(cls, Profile) and cls.name == name
    for hook in HOOKS:
        ours, base = inspect.signature(getattr(cls, hook)), inspect.signature(getattr(Profile, hook))
        names = [[p for p in sig.parameters if p != "self"] for sig in (ours, base)]  # a staticmethod has no self
        assert names[0] == names[1], f"{name}.{hook}{ours} != Profile.{hook}{base}"


def test_a_class_that_is_not_a_profile_is_refused_in_one_line() -> None:
    class Bare:
        name = "bare"

    with pytest.raises(ConfigError, match="make it subclass corl_bench.profile.Profile"):
        check_profile_class("bare", Bare)
    check_profile_class("micro", PROFILES.get("micro"))


def test_the_defaults_of_the_base_class() -> None:
    class Minimal(Profile):
        name = "minimal"

    m = Minimal()
    assert m.missing(["x"]) == [] and m.prepare(["x"]) is None and m.decontaminate({}) is None
    assert m.rephraser() is None and m.stop_strings("fewshot") == () and Minimal.dev_benchmark() is None
    assert Minimal.default_benchmarks() == () and Minimal.takes_images(None) is False
    assert Minimal.own_image_codec(None) is True
    assert Minimal.check_memory(None, None) == [] and Minimal.fill_defaults("cfg", None) == ("cfg", [])
    with pytest.raises(NotImplementedError, match="must implement load"):
        m.load("x")


def test_the_core_never_probes_a_profile_for_a_hook() -> None:
    found = []
    for f in _files(CORE + [PKG / "profile.py"]):
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
                    and node.args and "profile" in ast.unparse(node.args[0]).lower()):
                found.append(f"{f.relative_to(PKG.parent)}:{node.lineno}: {ast.unparse(node)}")
            if isinstance(node, ast.Attribute) and node.attr == "signature" and "profile" in f.name:
                found.append(f"{f.relative_to(PKG.parent)}:{node.lineno}: signature sniffing")
    assert not found, "\n".join(found)


def test_no_profile_name_in_the_core() -> None:
    """A spec says it is generated (and which profile serves it), a family says its profile, a spec its modality:
    no core module names a profile (a name that is also an engine's, ``hf``, is left to the engine)."""
    names = set(PROFILES.names()) - set(ENGINES.names())
    assert {"micro", "micro-visual"} <= names
    found = []
    for f in _files(CORE):
        tree = ast.parse(f.read_text(encoding="utf-8"))
        allowed = {id(c) for n in ast.walk(tree) if _is_register_lazy(n) for c in ast.walk(n)}
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                      if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
                      and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names
                    and id(node) not in allowed | docstrings):
                found.append(f"{f.relative_to(PKG.parent)}:{node.lineno}: {node.value!r}")
            if (isinstance(node, ast.Compare) and "profile" in ast.unparse(node.left).lower()
                    and ast.unparse(node.left).endswith(".name")
                    and any(isinstance(c, ast.Constant) and isinstance(c.value, str) for c in node.comparators)):
                found.append(f"{f.relative_to(PKG.parent)}:{node.lineno}: {ast.unparse(node)} (ask the profile)")
    assert not found, "\n".join(found)


def test_every_family_says_its_profile() -> None:
    for name in FAMILIES.names():
        assert FAMILIES.get(name).profile in PROFILES, name
