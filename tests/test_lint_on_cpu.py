"""``ruff check`` finds nothing in the repository, with the rule set of pyproject.toml ([tool.ruff.lint]: pyflakes and
pycodestyle's error classes E4, E7, E9). ruff is pinned in the test extras (``pip install -e '.[test]'``), so CI runs
this; without it the test is skipped with the command that installs it.

Fix a finding in place, or run ``ruff check --fix`` for the fixable ones.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_ruff_check_finds_nothing() -> None:
    if importlib.util.find_spec("ruff") is None:
        pytest.skip("ruff is not installed: pip install -c constraints-cpu.txt -e '.[test]' (it pins ruff)")
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "."],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"ruff check found problems (ruff check --fix fixes most):\n{proc.stdout}{proc.stderr}"
