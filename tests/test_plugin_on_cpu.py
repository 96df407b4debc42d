"""A third-party method as an installed plugin: the tutorial's "Add a method" example (docs/tutorial.md), packaged
with an entry point in the ``corl_bench.methods`` group, pip-installed into a scratch directory, listed by
``corl-bench ls methods`` and trained in the micro profile — with no edit to corl-bench itself.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]


def readme_example() -> str:
    text = (ROOT / "docs" / "tutorial.md").read_text(encoding="utf-8")
    section = text.split("## Add a method", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("plugin-src")
    (src / "corl_plugin_demo").mkdir()
    (src / "corl_plugin_demo" / "__init__.py").write_text("")
    (src / "corl_plugin_demo" / "method.py").write_text(readme_example())
    (src / "pyproject.toml").write_text(textwrap.dedent("""
        [build-system]
        requires = ["setuptools"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "corl-plugin-demo"
        version = "0.1"
        [project.entry-points."corl_bench.methods"]
        confident-ttrl = "corl_plugin_demo.method:ConfidentTTRL"
        [tool.setuptools]
        packages = ["corl_plugin_demo"]
    """))
    target = tmp_path_factory.mktemp("plugin-site")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--disable-pip-version-check", "--target", str(target), str(src)], check=True,
                   capture_output=True, timeout=300)
    return target


def _env(plugin: Path) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(plugin), str(ROOT)]))


def test_readme_example_is_about_fifty_lines_and_self_registers():
    code = readme_example()
    assert 15 <= len(code.splitlines()) <= 60
    assert '@METHODS.register("confident-ttrl")' in code


def test_installed_plugin_is_listed_by_ls_methods(plugin_path):
    cli = Path(sys.executable).parent / "corl-bench"
    out = subprocess.run([str(cli), "ls", "methods"], env=_env(plugin_path), capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "confident-ttrl" in out.stdout


def test_installed_plugin_trains_in_the_micro_profile(plugin_path, tmp_path):
    script = textwrap.dedent(f"""
        from corl_bench.config import load_config
        from corl_bench.registries import FAMILIES
        from corl_bench.train.runner import run
        from tests.conftest import tiny_family

        fam = tiny_family("qwen2-bpe", warmstart_steps=4, warmstart_batch=16)
        FAMILIES.register(fam.name, fam)
        cfg = load_config(None, ["method.name=confident-ttrl", "cohort.name=tiny-single",
            "cohort.agents=[{{name: a0, family: tiny-qwen2-bpe}}]", "run.steps=2",
            "run.output_dir={tmp_path / 'runs'}", "model.cache_dir={tmp_path / 'cache'}",
            "rollout.prompts_per_step=4", "rollout.samples_per_prompt=4", "rollout.max_new_tokens=12",
            "eval.max_problems=4", "eval.samples=2", "eval.max_new_tokens=12"])
        print(run(cfg))
    """)
    out = subprocess.run([sys.executable, "-c", script], env=_env(plugin_path), capture_output=True, text=True,
                         timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    run_dir = Path(out.stdout.strip().splitlines()[-1])
    info = json.loads((run_dir / "run.json").read_text())
    assert info["method"] == "confident-ttrl" and info["status"] == "finished"
    assert len((run_dir / "metrics.jsonl").read_text().splitlines()) == 2
