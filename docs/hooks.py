"""MkDocs hook (``hooks:`` in mkdocs.yml): the reference pages, generated from the code at build time.

``reference/config.md``, ``reference/cli.md`` and the registry pages (``reference/methods.md``, ``benchmarks.md``,
``cohorts.md``, ``profiles.md``, ``engines.md``, ``families.md``) are not files of the repository: :func:`on_files`
adds them from :func:`corl_bench.docref.pages` and :func:`corl_bench.docref_registries.pages`, so they describe
exactly the code being built. The checkout's own ``corl_bench`` is documented (its root goes on ``sys.path`` when
it is not there), whichever copy is installed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.exceptions import PluginError
    from mkdocs.structure.files import File

    if not any(Path(p or ".").resolve() == ROOT for p in sys.path):
        sys.path.insert(0, str(ROOT))
    import typer

    from corl_bench.cli import app
    from corl_bench.docref import pages
    from corl_bench.docref_registries import pages as registry_pages

    for uri, text in {**pages(typer.main.get_command(app)), **registry_pages()}.items():
        if files.get_file_from_path(uri) is not None:
            raise PluginError(f"docs/{uri} is generated from the code when the site is built; delete the file "
                              "(a written copy would drift from the code)")
        files.append(File.generated(config, uri, content=text))
    return files
