"""scripts/bench_limits.py on the shipped micro model: the FLOP and byte counts it divides by are those of the model
(checked against its own Linear layers and config), and every fraction it reports is a real ratio of measured rates
(no timing is asserted: the machine decides those)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("bench_limits", ROOT / "scripts" / "bench_limits.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_matmul_weights_count_every_linear_including_the_head():
    import torch

    bl = _script()
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3, bias=False))
    assert bl.matmul_weights(model) == 4 * 8 + 8 * 3


def test_the_micro_model_row_is_consistent(tmp_path):
    out = tmp_path / "limits.json"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_limits.py"), "--models", "micro",
                           "--threads", "1", "--rows", "4", "--tokens", "16", "--context", "8", "--repeats", "1",
                           "--decode-steps", "2", "--json", str(out)], capture_output=True, text=True, cwd=ROOT,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = json.loads(out.read_text())["models"][0]
    s, w = r["shape"], r["matmul_weights"]
    # the qwen2-bpe micro family: 4 layers of width 128 (q, o 128x128; k, v 128x64; MLP 3 x 128x384) + the head
    assert (s["layers"], s["hidden"], s["intermediate"]) == (4, 128, 384)
    assert w == 4 * (2 * 128 * 128 + 2 * 128 * 64 + 3 * 128 * 384) + s["vocab"] * 128
    t, d = r["train"], r["decode"]
    assert t["gflop"] * 1e9 == 6 * w * 4 * 16 + 12 * 4 * 4 * 16 ** 2 * s["heads"] * s["head_dim"]
    assert abs(t["fraction_of_peak"] - t["gflops"] / r["peak_gflops"]) < 1e-9 and t["fraction_of_peak"] > 0
    assert d["binding"] in ("bandwidth", "compute") and d["bytes_per_step"] > 4 * w
    assert abs(d["fraction_of_binding_bound"] * min(d["bandwidth_bound_tokens_per_s"], d["compute_bound_tokens_per_s"])
               - d["tokens_per_s"]) < 1e-6 * d["tokens_per_s"]
    assert r["machine"]["cores"] >= 1 and "micro:" in proc.stdout
