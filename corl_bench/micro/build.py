"""Child-process entry point: warm-start one micro family and move its checkpoint into place.

    echo '<Family as JSON>' | python -m corl_bench.micro.build --target <checkpoint dir>

Prints ``PROGRESS <done> <total>`` lines on stdout. Single-threaded, so a rebuild is bit-identical on the same
machine. The checkpoint is written to a sibling temporary folder and renamed, so a killed build leaves nothing
half-written; if another process finished the same build first, its checkpoint is kept.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m corl_bench.micro.build")
    ap.add_argument("--target", required=True)
    args = ap.parse_args(argv)
    import torch

    data = json.loads(sys.stdin.read())
    if data.get("kind") == "visual":  # a vision-language family of the micro visual world
        from corl_bench.micro.vl_families import VisualFamily
        from corl_bench.micro.vl_warmstart import save_checkpoint, warm_start

        for key in ("text_kwargs", "vision_kwargs"):
            data[key] = tuple(tuple(kv) for kv in data[key])
        family = VisualFamily(**data)
    else:
        from corl_bench.micro.families import Family
        from corl_bench.micro.warmstart import save_checkpoint, warm_start

        data["model_kwargs"] = tuple(tuple(kv) for kv in data["model_kwargs"])
        family = Family(**data)
    torch.set_num_threads(1)

    def report(step: int, total: int, _model: object) -> None:
        if step % 5 == 0 or step == total:
            print(f"PROGRESS {step} {total}", flush=True)

    model, tok, record = warm_start(family, progress=report, threads=1)
    record["torch"] = torch.__version__
    final = Path(args.target)
    tmp = final.with_name(f"{final.name}.tmp-{os.getpid()}")
    save_checkpoint(model, tok, record, tmp)
    try:
        os.rename(tmp, final)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
