"""A non-editable install works: the wheel holds every package and data file the code reads, and the installed console
script runs ``ls``, a one-step micro run and ``table --reference paper`` from a directory outside the checkout.

The wheel is built from this checkout (``pip wheel --no-build-isolation``: no index needed) and installed without
``-e`` and without dependencies into a fresh virtual environment whose dependencies come from the project's own
environment (a ``.pth`` line that puts this environment's site-packages *after* the new one's, so the editable
install of the checkout is not active there). Nothing is imported from the checkout in the installed runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TIMEOUT = 600


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def _tree_packages() -> set[str]:
    """Every importable package of the source tree, under its installed name."""
    dirs = _pyproject()["tool"]["setuptools"]["package-dir"]
    found = set()
    for name, rel in dirs.items():
        root = REPO / rel
        for init in root.rglob("__init__.py"):
            parts = init.parent.relative_to(root).parts
            if "__pycache__" in parts:
                continue
            full = ".".join((name, *parts))
            if name == "corl_bench" and len(parts) >= 1 and f"corl_bench.{parts[0]}" in dirs:
                continue  # a mapped package (trainers, ...) is listed under its own root
            found.add(full)
    return found


def test_the_package_list_is_the_tree_on_cpu() -> None:
    listed = set(_pyproject()["tool"]["setuptools"]["packages"])
    assert listed == _tree_packages(), ("pyproject.toml [tool.setuptools] packages differs from the tree: missing "
                                        f"{sorted(_tree_packages() - listed)}, extra {sorted(listed - _tree_packages())}")


def _build_wheel(out: Path) -> Path:
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "--disable-pip-version-check", "-w", str(out), str(REPO)],
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    wheels = list(out.glob("corl_bench-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def _fresh_venv(root: Path, wheel: Path) -> Path:
    """A new virtual environment with the wheel installed (no -e, no deps); the project's site-packages supplies the
    dependencies, after the new environment's own."""
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=TIMEOUT)
    purelib = Path(subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; "
                                   "print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True,
                                  check=True, timeout=TIMEOUT).stdout.strip())
    (purelib / "zz_project_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                           "--no-deps", "--no-index", "--disable-pip-version-check", str(wheel)],
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return venv


def test_the_wheel_installs_and_runs_outside_the_checkout_on_cpu(tmp_path: Path) -> None:
    wheel = _build_wheel(tmp_path / "dist")
    names = set(zipfile.ZipFile(wheel).namelist())
    for must in ("corl_bench/models/device.py", "corl_bench/hf/profile.py", "corl_bench/report/paper-results.json",
                 "corl_bench/micro/checkpoints/qwen2-bpe/model.safetensors",
                 "corl_bench/micro/checkpoints/llava-micro/manifest.json", "corl_bench/grading/verifier.py",
                 "corl_bench/report/claims.yaml", "corl_bench/eval/converters.py",
                 "corl_bench/trainers/corl.py", "corl_bench/baselines/ttrl.py", "corl_bench/benchmarks/gsm8k.yaml",
                 "corl_bench/cohorts/cross-family.yaml"):
        assert must in names, f"{must} is not in {wheel.name}"
    venv = _fresh_venv(tmp_path, wheel)
    cli = venv / "bin" / "corl-bench"
    assert cli.is_file()
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CORL_BENCH_COHORTS", "CORL_BENCH_DATA")}
    env.update(COLUMNS="250", NO_COLOR="1", CORL_BENCH_CACHE=os.environ.get("CORL_BENCH_CACHE", str(tmp_path / "cache")))

    def cli_run(*args: str) -> subprocess.CompletedProcess:
        proc = subprocess.run([str(cli), *args], cwd=work, env=env, capture_output=True, text=True, timeout=TIMEOUT)
        assert proc.returncode == 0, f"corl-bench {' '.join(args)}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
        return proc

    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import corl_bench; print(corl_bench.__file__)"],
                           cwd=work, env=env, capture_output=True, text=True, timeout=TIMEOUT).stdout.strip()
    assert Path(where).is_relative_to(venv), f"corl_bench imported from {where}, not from the installed wheel"
    assert "corl" in cli_run("ls").stdout
    cli_run("run", "--method", "ttrl", "--cohort", "single", "--steps", "1", "--set", "rollout.prompts_per_step=2",
            "--set", "rollout.samples_per_prompt=2", "--set", "eval.max_problems=4", "--set", "eval.samples=2")
    runs = list((work / "results" / "runs").iterdir())
    assert len(runs) == 1 and (runs[0] / "eval" / "final").is_dir()
    table = cli_run("table", "--reference", "paper").stdout
    assert "Co-RL (Different family)" in table or "Co-RL (different family)" in table, table[-2000:]
    assert "80.1" in table  # the paper's Qwen2.5-3B Co-RL GSM8K, read from the wheel's package data
