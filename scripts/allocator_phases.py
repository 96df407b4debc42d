#!/usr/bin/env python
"""Where a step-cost cell's memory goes, phase by phase, under four host allocators (issue 40, item 4).

    python scripts/allocator_phases.py qwen05b-lora/k4/t32 --allocator kept --micro-batch 16
    for a in kept glibc mmap4m lean; do python scripts/allocator_phases.py qwen05b-lora/k4/t32 --allocator $a \\
        --micro-batch 16; done                            # the comparison in corl_bench/hf/fit.py's KEPT_HEAP

Runs one cell of ``scripts/step_costs.py`` (KEY as its ``--plan`` lists) in this process and prints, for each
agent phase (``generate``, ``score`` = the no-grad forward, ``update`` = forward with grad, backward, optimizer),
its seconds, the resident set before it, the phase's own peak (``VmHWM`` reset at the phase's start through
``/proc/self/clear_refs``) and the resident set after it. Allocators:

- ``kept``: ``memory.keep_host_memory=true`` (the default; :mod:`corl_bench.hostmem`: no mmap, no trimming);
- ``glibc``: ``memory.keep_host_memory=false``, the C library's defaults (dynamic mmap threshold up to 32 MiB);
- ``mmap4m``: ``false``, and every block of 4 MiB or more mapped and unmapped on its own, the heap never trimmed
  (``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``, set in the environment before Python starts: the script
  re-executes itself with them);
- ``lean``: ``false``, and every block of 128 KiB or more mapped on its own (the peak is the live memory).

Seconds compare only within one machine and load; run the allocators one after the other with nothing else running.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ENV = {"kept": {}, "glibc": {}, "mmap4m": {"MALLOC_MMAP_THRESHOLD_": str(4 << 20),
                                           "MALLOC_TRIM_THRESHOLD_": str(2 ** 32 - 1)},
       "lean": {"MALLOC_MMAP_THRESHOLD_": str(128 << 10)}}


def _status() -> dict[str, float]:
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            out[line.split(":")[0]] = int(line.split()[1]) * 1024 / 1e9
    return out


def _watch_phases() -> None:
    from corl_bench.train import agent as agent_module

    for name in ("generate", "score", "update"):
        inner = getattr(agent_module.Agent, name)

        def phase(self, *args, _inner=inner, _name=name, **kwargs):
            before = _status()["VmRSS"]
            Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM: the peak of this phase alone
            t = time.perf_counter()
            result = _inner(self, *args, **kwargs)
            now = _status()
            print(f"{_name:9s} {time.perf_counter() - t:7.1f} s  resident before {before:6.2f} GB  peak "
                  f"{now['VmHWM']:6.2f} GB  after {now['VmRSS']:6.2f} GB", flush=True)
            return result

        setattr(agent_module.Agent, name, phase)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("key", help="a step_costs.py cell, e.g. qwen05b-lora/k4/t32")
    ap.add_argument("--allocator", choices=sorted(ENV), default="kept")
    ap.add_argument("--micro-batch", type=int, default=0, help="pin memory.micro_batch (0: the hf profile's fit)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--data", default=os.environ.get("CORL_BENCH_DATA", str(REPO.parent / "shared" / "data")))
    args = ap.parse_args()
    want = ENV[args.allocator]
    if any(os.environ.get(k) != v for k, v in want.items()):  # glibc reads these once, at start-up
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **want})
    sys.path.insert(0, str(REPO / "scripts"))
    import step_costs
    import yaml

    from corl_bench.cli import main as cli

    _watch_phases()
    with tempfile.TemporaryDirectory() as tmp:
        cfg = step_costs.config(args.key, Path(tmp), args.data, args.threads)
        memory = {"keep_host_memory": args.allocator == "kept"}
        if args.micro_batch:
            memory.update(micro_batch=args.micro_batch, logit_chunk=256)
        cfg["memory"] = {**cfg.get("memory", {}), **memory}
        path = Path(tmp) / "cell.yaml"
        path.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
        print(f"{args.key}, allocator {args.allocator}, {args.threads} thread(s), {step_costs._cpu()}", flush=True)
        sys.argv = ["corl-bench", "run", "--config", str(path)]
        cli()


if __name__ == "__main__":
    main()
