#!/usr/bin/env python
"""Wall time of the default main job, from a cold and from a warm model cache, measured in one session.

    python scripts/bench_run.py                 # corl x cross-family, 1 cold + 1 warm run
    python scripts/bench_run.py --build         # also a cold run that warm-starts the families itself
    python scripts/bench_run.py --warm 2 -- --steps 20   # extra args go to `corl-bench run`

Cold = an empty micro-model cache: the run reads the shipped checkpoints (corl_bench/micro/checkpoints), so nothing
is built; warm = the same cache again. ``--build`` first times the path before checkpoints shipped: an empty cache
and ``model.micro_checkpoints=build`` (the families are warm-started in parallel, single-threaded, then trained).
On this machine that run's metrics and predictions must equal the shipped run's (``scripts/compare_runs.py`` on the
directories kept with ``--keep``). Targets (issue #2): cold <= 600 s and warm <= 300 s on a 2-core CPU. Results go
to stdout and --json. Runs write into a temporary results directory, so nothing under ./results changes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def timed_run(cli: str, cache: Path, out: Path, extra: list[str], method: str, cohort: str) -> float:
    env = dict(os.environ, CORL_BENCH_CACHE=str(cache))
    cmd = [cli, "run", "--method", method, "--cohort", cohort, "--output-dir", str(out), *extra]
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> int:
    from corl_bench.results import RunDir

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--method", default="corl")
    ap.add_argument("--cohort", default="cross-family")
    ap.add_argument("--warm", type=int, default=1, help="warm repetitions after the cold run")
    ap.add_argument("--json", type=Path, default=None, help="write the figures here as JSON")
    ap.add_argument("--keep", type=Path, default=None, help="keep the run directories here (default: discard)")
    ap.add_argument("--build", action="store_true", help="first a cold run that warm-starts the families itself "
                    "(model.micro_checkpoints=build, its own empty cache)")
    ap.add_argument("extra", nargs="*", help="extra arguments for corl-bench run (after --)")
    args = ap.parse_args()
    cli = shutil.which("corl-bench") or str(Path(sys.executable).parent / "corl-bench")
    with tempfile.TemporaryDirectory(prefix="corl-bench-bench-") as tmp:
        cache, out = Path(tmp) / "cache", Path(tmp) / "runs"
        build = None
        if args.build:
            build = timed_run(cli, Path(tmp) / "build-cache", out,
                              [*args.extra, "--set", "model.micro_checkpoints=build"], args.method, args.cohort)
        cold = timed_run(cli, cache, out, args.extra, args.method, args.cohort)
        warm = [timed_run(cli, cache, out, args.extra, args.method, args.cohort) for _ in range(args.warm)]
        runs = sorted(out.iterdir())
        phases = [dict(RunDir(r).record().timings or {}) for r in runs]
        if args.keep:
            args.keep.mkdir(parents=True, exist_ok=True)
            for r in runs:
                shutil.copytree(r, args.keep / r.name)
    result = {"method": args.method, "cohort": args.cohort, "extra": args.extra,
              **({"cold_build_s": round(build, 1), "cold_over_cold_build": round(cold / build, 3)} if build else {}),
              "cold_s": round(cold, 1),
              "warm_s": [round(w, 1) for w in warm], "warm_over_cold": round(min(warm) / cold, 3),
              "phases_s": [{k: round(v, 1) for k, v in p.items()} for p in phases],
              "cpu_count": os.cpu_count(), "platform": platform.platform()}
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
