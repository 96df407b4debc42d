#!/usr/bin/env python
"""Build tiny random checkpoints of real vision-language architectures (corl_bench.models.tiny_vlm) into a folder,
for a CPU run of real VLM code paths without any download.

    python scripts/build_tiny_vlms.py --out ~/.cache/corl-bench/tiny-vlm qwen2.5-vl internvl
    corl-bench run --method corl --set model.profile=hf \
        --set "cohort.agents=[{name: a0-qwen, family: ~/.cache/corl-bench/tiny-vlm/qwen2.5-vl}, ..."

The weights are random: a run on them shows mechanics, wall time and memory, not learning.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from corl_bench.models.tiny_vlm import ARCHS, build  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("archs", nargs="*", default=list(ARCHS), help=f"default: all of {', '.join(ARCHS)}")
    ap.add_argument("--out", type=Path, required=True, help="folder that gets one sub-folder per architecture")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    unknown = [a for a in args.archs if a not in ARCHS]
    if unknown:
        ap.error(f"unknown architecture {unknown[0]!r}; choose from {', '.join(ARCHS)}")
    for i, arch in enumerate(args.archs):
        path = build(arch, args.out.expanduser() / arch, seed=args.seed + i)
        logging.info("%s -> %s", arch, path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
