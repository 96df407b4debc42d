"""Tests for ``corl_bench.registries`` (pure Python, no torch)."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import textwrap
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterator

import pytest

from corl_bench.registries import Registry, RegistryError, load_object

REPO_ROOT = Path(__file__).resolve().parents[1]
_PREFIXES = ("regfix_", "lazymod_", "selfreg_", "plugpkg_", "tmpmod_")


@pytest.fixture(autouse=True)
def _restore_sys_modules() -> Iterator[None]:
    """Drop throwaway modules imported by a test so tests stay independent."""
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name.startswith(_PREFIXES):
            del sys.modules[name]


def _unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def _write(path: Path, source: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source))


@pytest.fixture
def reg() -> Registry[Any]:
    return Registry("method")


@pytest.fixture
def three(reg: Registry[Any]) -> Registry[Any]:
    for name in ("corl", "gt-reward", "ttrl"):
        reg.register(name, type(name.replace("-", "_"), (), {}))
    return reg


def test_decorator_registration_and_get(reg: Registry[Any]) -> None:
    @reg.register("corl")
    class CoRL:
        pass

    assert reg.get("corl") is CoRL
    assert "corl" in reg and "nope" not in reg and 3 not in reg
    assert reg.names() == ["corl"]
    assert reg.items() == [("corl", CoRL)]


def test_direct_registration_returns_object(reg: Registry[Any]) -> None:
    def fn() -> int:
        return 1

    assert reg.register("fn", fn) is fn
    assert reg.get("fn") is fn


def test_duplicate_name_error_message(reg: Registry[Any]) -> None:
    class CoRL:
        pass

    class Other:
        pass

    reg.register("corl", CoRL)
    with pytest.raises(RegistryError) as info:
        reg.register("corl", Other)
    expected = f"method 'corl' is already registered (by {__name__}:{CoRL.__qualname__}); pick another name"
    assert str(info.value) == expected
    assert reg.get("corl") is CoRL
    reg.register("gt-reward", Other)
    with pytest.raises(RegistryError, match="'gt_reward' is already registered"):  # '_' == '-'
        reg.register("gt_reward", CoRL)


def test_same_object_reregistration_is_noop(reg: Registry[Any]) -> None:
    def make() -> type:
        class Method:
            pass

        return Method

    first, second = make(), make()  # distinct objects, same module + qualname (a re-import)
    reg.register("m", first)
    reg.register("m", first)
    reg.register("m", second)
    assert reg.get("m") is first
    assert reg.names() == ["m"]


def test_did_you_mean_suggestion(three: Registry[Any]) -> None:
    with pytest.raises(RegistryError) as info:
        three.get("corl2")
    assert str(info.value) == "unknown method 'corl2'; did you mean 'corl'? valid: corl, gt-reward, ttrl"
    assert isinstance(info.value, KeyError)


def test_unknown_name_lists_valid_names_without_suggestion(three: Registry[Any]) -> None:
    with pytest.raises(RegistryError) as info:
        three.get("zzzzzz")
    assert str(info.value) == "unknown method 'zzzzzz'; valid: corl, gt-reward, ttrl"
    with pytest.raises(RegistryError, match=r"valid: \(none\)"):
        Registry("cohort").get("x")


def test_case_and_underscore_insensitive_lookup(three: Registry[Any]) -> None:
    assert three.get("GT_Reward") is three.get("gt-reward")
    assert "gt_reward" in three and " CORL " in three


def test_aliases(reg: Registry[Any]) -> None:
    class CoRL:
        pass

    reg.register("corl", CoRL, aliases=("co-rl", "cooperative_rl"))
    assert reg.get("co_rl") is CoRL and reg.get("Cooperative-RL") is CoRL
    assert reg.names() == ["corl"]
    with pytest.raises(RegistryError, match="'co-rl' is already registered"):
        reg.register("co-rl", object())
    with pytest.raises(RegistryError, match="'corl' is already registered"):
        reg.register("other", object(), aliases=("corl",))
    with pytest.raises(RegistryError, match="did you mean 'co-rl'"):
        reg.get("co-rll")
    reg.unregister("corl")
    assert "co-rl" not in reg and reg.names() == []


@pytest.mark.parametrize("bad", ["", "CoRL", "has space", "dot.ted", "-lead", "é"])
def test_invalid_name(reg: Registry[Any], bad: str) -> None:
    with pytest.raises(ValueError) as info:
        reg.register(bad, object())
    assert "invalid method name" in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(ValueError):
        reg.register("ok", object(), aliases=(bad,))


def test_freeze(three: Registry[Any]) -> None:
    corl = three.get("corl")
    three.freeze()
    with pytest.raises(RegistryError, match="frozen"):
        three.register("new", object())
    with pytest.raises(RegistryError, match="frozen"):
        three.register_lazy("lazy", "os:path")
    with pytest.raises(RegistryError, match="frozen"):
        three.unregister("corl")
    three.register("corl", corl)  # same object: still a no-op
    assert three.get("corl") is corl


def test_unregister(three: Registry[Any]) -> None:
    three.unregister("GT_REWARD")
    assert three.names() == ["corl", "ttrl"]
    with pytest.raises(RegistryError, match="unknown method 'gt-reward'"):
        three.unregister("gt-reward")


def test_lazy_placeholder_not_imported_until_get(
    reg: Registry[Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mod = _unique("lazymod")
    _write(tmp_path / f"{mod}.py", "class Thing:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    reg.register_lazy("thing", f"{mod}:Thing")
    assert reg.names() == ["thing"] and "thing" in reg
    assert mod not in sys.modules
    thing = reg.get("thing")
    assert mod in sys.modules and thing is sys.modules[mod].Thing
    assert reg.get("thing") is thing
    reg.register("thing", thing)  # the real object matches its placeholder: no-op


def test_lazy_module_that_self_registers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fix, mod = _unique("regfix"), _unique("selfreg")
    _write(tmp_path / f"{fix}.py", "from corl_bench.registries import Registry\nREG = Registry('method')\n")
    _write(tmp_path / f"{mod}.py", f"from {fix} import REG\n@REG.register('thing')\nclass Thing:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = importlib.import_module(fix).REG
    reg.register_lazy("thing", f"{mod}:Thing")
    assert reg.get("thing") is sys.modules[mod].Thing


def test_lazy_errors(reg: Registry[Any]) -> None:
    with pytest.raises(ValueError, match="module.path:attr"):
        reg.register_lazy("x", "no_colon_here")
    reg.register_lazy("x", "corl_bench_missing_module_xyz:Thing")
    with pytest.raises(RegistryError) as info:
        reg.get("x")
    msg = str(info.value)
    assert msg.startswith("cannot load method 'x' from 'corl_bench_missing_module_xyz:Thing'")
    assert "ModuleNotFoundError" in msg and "\n" not in msg and msg.count("cannot load") == 1


def test_load_object() -> None:
    assert load_object("os.path:join") is os.path.join
    assert load_object("os:path.join") is os.path.join
    with pytest.raises(ImportError, match="cannot load 'os:nope'.*AttributeError"):
        load_object("os:nope")
    with pytest.raises(ValueError):
        load_object("os.path")


def _make_plugin_package(tmp_path: Path, *, broken: bool = False) -> tuple[str, str]:
    fix, pkg = _unique("regfix"), _unique("plugpkg")
    _write(tmp_path / f"{fix}.py", f"from corl_bench.registries import Registry\nREG = Registry('method', discover=({pkg!r},))\n")
    _write(tmp_path / pkg / "__init__.py", "")
    _write(tmp_path / pkg / "alpha.py", f"from {fix} import REG\n@REG.register('alpha')\nclass Alpha:\n    pass\n")
    _write(tmp_path / pkg / "beta.py", f"from {fix} import REG\nREG.register('beta', len, aliases=('b',))\n")
    _write(tmp_path / pkg / "_private.py", "raise RuntimeError('underscore modules must not be imported')\n")
    if broken:
        _write(tmp_path / pkg / "gamma.py", "raise RuntimeError('boom\\nsecond line')\n")
    return fix, pkg


def test_discovery_of_self_registering_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fix, pkg = _make_plugin_package(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = importlib.import_module(fix).REG
    assert f"{pkg}.alpha" not in sys.modules
    assert reg.names() == ["alpha", "beta"]
    assert reg.get("alpha") is sys.modules[f"{pkg}.alpha"].Alpha and reg.get("b") is len
    assert f"{pkg}._private" not in sys.modules


def test_discovery_import_error_names_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fix, pkg = _make_plugin_package(tmp_path, broken=True)
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = importlib.import_module(fix).REG
    for call in (reg.names, lambda: reg.get("alpha")):  # raised again on retry, never swallowed
        with pytest.raises(RegistryError) as info:
            call()
        msg = str(info.value)
        assert f"'{pkg}.gamma'" in msg and "RuntimeError: boom second line" in msg and "\n" not in msg


def test_discovery_of_missing_package() -> None:
    with pytest.raises(RegistryError, match="cannot import 'corl_bench_no_such_pkg' while discovering methods"):
        Registry("method", discover=("corl_bench_no_such_pkg",)).names()


def test_concurrent_first_lookup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fix, _ = _make_plugin_package(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = importlib.import_module(fix).REG
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda i: (reg.names(), reg.get("beta")), range(32)))
    assert all(r == (["alpha", "beta"], len) for r in results)


def test_entry_points_are_lazy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mod, group = _unique("tmpmod"), "corl_bench.methods"
    _write(tmp_path / f"{mod}.py", "class Thing:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    fake = [
        importlib.metadata.EntryPoint(name="plug", value=f"{mod}:Thing", group=group),
        importlib.metadata.EntryPoint(name="Bad Name", value=f"{mod}:Thing", group=group),
    ]
    seen: list[str] = []

    def entry_points(*, group: str) -> list[importlib.metadata.EntryPoint]:
        seen.append(group)
        return [ep for ep in fake if ep.group == group]

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    reg: Registry[Any] = Registry("method", entry_point_group=group)
    with pytest.warns(RuntimeWarning, match="skipping entry point 'Bad Name'"):
        assert reg.names() == ["plug"]
    assert seen == [group] and mod not in sys.modules
    assert reg.get("plug") is sys.modules[mod].Thing
    assert reg.names() == ["plug"] and seen == [group]  # discovery runs once


def test_import_does_not_pull_in_torch() -> None:
    code = (
        "import sys, corl_bench.registries as r\n"
        "heavy = [m for m in ('torch', 'numpy', 'transformers') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "r.Registry('method').names()\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
