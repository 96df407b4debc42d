#!/usr/bin/env python
"""Kill a micro run with SIGKILL at random moments, resume it, and check it ends bit-identical to an uninterrupted run.

    python scripts/kill_test.py                       # 20 trials, corl x cross-family, 6 steps
    python scripts/kill_test.py --trials 5 --json out.json --keep /tmp/kills
    python scripts/kill_test.py --trials 4 --cohort visual-cross-family   # the micro visual world's VLM agents

One uninterrupted reference run is made first and timed. Each trial starts the same run, kills it (SIGKILL, the
whole process group) at a uniformly random moment of the reference duration — so kills land in warm start, the
base evaluation, rollouts, updates, checkpoint writes and the final evaluation in proportion to their time — and
every fourth trial instead waits for a checkpoint write to begin (a ``.tmp-step-*`` folder appears) and kills it
then. The run is resumed with ``corl-bench run --resume`` (killed again with probability --rekill) until it
finishes. Per trial: metrics (timings excluded), samples, predictions and final weights are compared with the
reference, and every JSON/JSONL file under the run directory must parse (a torn last line of a JSONL that the
resumed run rewrote is not allowed to survive). Exit 1 if any trial differs or leaves a corrupt file.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CONFIG = ["--method", "corl", "--steps", "6", "--set", "run.checkpoint_every=1",
          "--set", "rollout.prompts_per_step=4", "--set", "rollout.samples_per_prompt=4",
          "--set", "eval.max_problems=40", "--set", "run.log_samples_every=1"]


def start(cli: str, args: list[str]) -> subprocess.Popen:
    return subprocess.Popen([cli, "run", *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def corrupt_files(run_dir: Path) -> list[str]:
    bad = []
    for path in run_dir.rglob("*"):
        if path.suffix == ".json":
            try:
                json.loads(path.read_text())
            except (ValueError, UnicodeDecodeError):
                bad.append(str(path.relative_to(run_dir)))
        elif path.suffix == ".jsonl":
            for line in path.read_text().splitlines():
                try:
                    json.loads(line)
                except ValueError:
                    bad.append(str(path.relative_to(run_dir)))
                    break
    return bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0, help="seed of the kill schedule")
    ap.add_argument("--rekill", type=float, default=0.25, help="chance to kill a resumed run again")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--keep", type=Path, default=None, help="keep the run directories here")
    ap.add_argument("--cohort", default="cross-family", help="the Co-RL cohort (visual-cross-family: the VLM agents)")
    args = ap.parse_args()
    CONFIG[2:2] = ["--cohort", args.cohort]

    from corl_bench.results import RunDir
    from corl_bench.train.checkpoint import fingerprint_diff, run_fingerprint

    cli = str(Path(sys.executable).parent / "corl-bench")
    rng = random.Random(args.seed)
    root = args.keep or Path(tempfile.mkdtemp(prefix="corl-kill-"))
    root.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    subprocess.run([cli, "run", *CONFIG, "--output-dir", str(root / "reference"), "--run-id", "run", "--fresh"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    duration = time.perf_counter() - t0
    reference = run_fingerprint(root / "reference" / "run")
    trials = []
    for i in range(args.trials):
        out, run_dir = root / f"trial-{i:02d}", root / f"trial-{i:02d}" / "run"
        proc = start(cli, [*CONFIG, "--output-dir", str(out), "--run-id", "run", "--fresh"])
        t_start = time.perf_counter()
        if i % 4 == 3:  # target a checkpoint write
            mode, deadline = "checkpoint-write", t_start + duration * 1.5
            while proc.poll() is None and time.perf_counter() < deadline:
                if any(RunDir(run_dir).checkpoints_dir.glob(".tmp-step-*")):
                    break
                time.sleep(0.002)
        else:
            mode = "random"
            time.sleep(rng.uniform(0.5, duration * 0.98))
        killed_at = time.perf_counter() - t_start
        finished_before_kill = proc.poll() == 0
        kill(proc)
        kills, resumes = (0 if finished_before_kill else 1), 0
        while not RunDir(run_dir).record().finished if RunDir(run_dir).is_run() else True:
            resumes += 1
            if RunDir(run_dir).config_path.is_file():
                resume_args = ["--resume", str(run_dir)]
            else:  # killed before the run wrote its config: nothing to resume, start it again
                shutil.rmtree(run_dir, ignore_errors=True)
                resume_args = [*CONFIG, "--output-dir", str(out), "--run-id", "run", "--fresh"]
            proc = start(cli, resume_args)
            if rng.random() < args.rekill:
                time.sleep(rng.uniform(0.5, duration * 0.5))
                if proc.poll() is None:
                    kill(proc)
                    kills += 1
                    continue
            if proc.wait() != 0:
                trials.append({"trial": i, "mode": mode, "error": f"resume exited {proc.returncode}"})
                break
        else:
            diff = fingerprint_diff(reference, run_fingerprint(run_dir))
            trials.append({"trial": i, "mode": mode, "killed_at_s": round(killed_at, 2), "kills": kills,
                           "resumes": resumes, "identical": not diff, "differs_in": diff,
                           "corrupt_files": corrupt_files(run_dir)})
        print(json.dumps(trials[-1]), flush=True)
    summary = {"trials": len(trials), "identical": sum(t.get("identical", False) for t in trials),
               "corrupt_files": sum(len(t.get("corrupt_files", [])) for t in trials),
               "kills": sum(t.get("kills", 0) for t in trials), "reference_seconds": round(duration, 1),
               "details": trials}
    print(json.dumps({k: v for k, v in summary.items() if k != "details"}, indent=2))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
    ok = summary["identical"] == args.trials and summary["corrupt_files"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
