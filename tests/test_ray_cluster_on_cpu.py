"""``run.backend=ray`` on a real two-node Ray cluster on this machine: a head and a second node started with ``ray
start``, each advertising its own custom resource (``node_a``, ``node_b``); the two agents of a cross-family run are
pinned one to each node (a0 by its cohort entry's ``resources``, a1 by ``run.agent_resources``) and the run equals the
same run on the local backend bit for bit. run.json records each agent's Ray node, every checkpoint file was written
by the actor of its agent on that agent's node, and nothing the controller sends or receives holds a tensor (the
largest object it receives is a small fraction of one agent's checkpoint). The cluster has its own temp dir, ports
and auth token, and is torn down by the process ids this test started (never ``ray stop``, which would stop every
Ray of this user). Also the fast checks of the pinning options (no Ray needed).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import dataclasses

import pytest

from corl_bench.config import ConfigError, load_config
from corl_bench.registries import FAMILIES
from tests.conftest import tiny_family

ROOT = Path(__file__).resolve().parents[1]
AGENTS = ("[{name: a0, family: rctest-qwen2-bpe, resources: {node_a: 1}}, "
          "{name: a1, family: rctest-neox-bpe, seed_offset: 1}]")


def _register() -> None:
    """Two tiny families of different architectures and tokenizers, under this module's own names (the driver
    process registers the same)."""
    for name in ("qwen2-bpe", "neox-bpe"):
        fam = dataclasses.replace(tiny_family(name, warmstart_steps=4, warmstart_batch=16), name=f"rctest-{name}")
        if fam.name not in FAMILIES:
            FAMILIES.register(fam.name, fam)


def _sets(root: Path, out: str, backend: str, address: str = "") -> list[str]:
    """A 2-step cross-family Co-RL run of two tiny agents, a checkpoint after each step; a0 asks for node_a (its
    cohort entry), a1 for node_b (run.agent_resources). The local backend ignores the resources."""
    return ["method.name=corl", "cohort.name=tiny-cross", f"cohort.agents={AGENTS}",
            "run.agent_resources={a1: {node_b: 1}}", "run.steps=2", "run.checkpoint_every=1",
            f"run.output_dir={root / out}", "run.run_id=r", f"model.cache_dir={root / 'cache'}",
            "run.log_samples_every=1", "rollout.prompts_per_step=2", "rollout.samples_per_prompt=4",
            "rollout.max_new_tokens=8", "eval.max_problems=4", "eval.samples=2", "eval.max_new_tokens=8",
            "grpo.lr=1e-3", "model.threads=1", f"run.backend={backend}", f"run.ray_address={address}"]


# ---------------------------------------------------------------------- the options, checked without Ray
def test_agent_resources_are_validated_and_placed_on_the_named_agents(tmp_path):
    from corl_bench.train.runner import resolve

    _register()
    cfg = resolve(load_config(None, _sets(tmp_path, "x", "local"))).config
    assert {a.name: dict(a.resources) for a in cfg.cohort.agents} == {"a0": {"node_a": 1}, "a1": {"node_b": 1}}
    with pytest.raises(ConfigError, match=r"run.agent_resources names agent 'b7'.*its agents: a0, a1"):
        resolve(load_config(None, _sets(tmp_path, "x", "local") + ["run.agent_resources={b7: {node_b: 1}}"]))
    bad = {"{CPU: 1}": "'CPU' is not a custom resource name; CPUs and GPUs are the agent's cpus / gpus",
           "{node_a: -1}": "node_a must be a number > 0", "{node_a: 0.00001}": "at most 4 decimals",
           "{node_a: yes}": "node_a must be a number > 0"}
    for value, message in bad.items():
        agents = f"[{{name: a0, family: rctest-qwen2-bpe, resources: {value}}}]"
        with pytest.raises(ConfigError, match="cohort agent 'a0': resources") as e:
            load_config(None, [f"cohort.agents={agents}"])
        assert message in str(e.value) and "\n" not in str(e.value)
        with pytest.raises(ConfigError, match=f"run.agent_resources.a0.*{message[:20]}"):
            load_config(None, [f"run.agent_resources={{a0: {value}}}"])
    with pytest.raises(ConfigError, match="run.agent_resources.a0 must be a mapping of Ray resource"):
        load_config(None, ["run.agent_resources={a0: [node_a]}"])


def test_an_agent_no_node_can_host_is_refused_instead_of_waiting_forever(tmp_path):
    from corl_bench.config import MachineError
    from corl_bench.train.actors import check_nodes, demands
    from corl_bench.train.runner import resolve

    _register()
    cfg = resolve(load_config(None, _sets(tmp_path, "x", "local"))).config
    wanted = demands(cfg)
    assert wanted == {"a0": {"CPU": 1.0, "node_a": 1.0}, "a1": {"CPU": 1.0, "node_b": 1.0}}
    two = [{"CPU": 1.0, "node_a": 1.0, "memory": 1e9}, {"CPU": 1.0, "node_b": 1.0}]
    check_nodes(wanted, two)  # one agent per node
    with pytest.raises(MachineError, match=r"no Ray node can host agent a1 \(CPU=1, node_b=1; the cluster has "
                                           r"node 0: CPU=1, node_a=1\)"):
        check_nodes(wanted, two[:1])
    with pytest.raises(MachineError, match="no Ray node can host agent a0"):  # each resource on another node
        check_nodes(wanted, [{"CPU": 2.0}, {"node_a": 1.0, "node_b": 1.0}])
    with pytest.raises(MachineError, match=r"the agents need CPU=2 together and the Ray cluster has CPU=1\.5"):
        check_nodes(wanted, [{"CPU": 1.0, "node_a": 1.0, "node_b": 1.0}, {"CPU": 0.5}])
    check_nodes({f"a{i}": {"CPU": 1.0, "GPU": 0.1} for i in range(3)}, [{"CPU": 3.0, "GPU": 0.3}])  # 3 x 0.1 fits


# ---------------------------------------------------------------------- a two-node cluster
def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class Cluster:
    """A head and one more node of a fresh Ray cluster on this machine (``ray start --block``, each in its own
    process group), with a temp dir, ports and auth token of its own; :meth:`stop` kills exactly those processes.
    Each node offers 2 CPUs, room for both agents: only their resources keep them apart."""

    def __init__(self) -> None:
        self.ray = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
        if self.ray is None:
            pytest.skip("the `ray` command is not installed next to this Python (pip install -e '.[ray]')")
        self.tmp = Path(tempfile.mkdtemp(prefix="corl-rc-", dir="/tmp"))  # short: Ray's socket paths must fit
        self.env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32),
                    "RAY_USAGE_STATS_ENABLED": "0"}
        self.procs: list[subprocess.Popen] = []
        self.pids: set[int] = set()

    def _node(self, name: str, resource: str, ports: list[int], head_args: list[str]) -> None:
        per_node = ["--node-manager-port", "--object-manager-port", "--dashboard-agent-listen-port",
                    "--dashboard-agent-grpc-port", "--metrics-export-port", "--runtime-env-agent-port"]
        cmd = [self.ray, "start", *head_args, "--node-ip-address", "127.0.0.1", "--temp-dir", str(self.tmp),
               "--num-cpus", "2", "--resources", json.dumps({resource: 1}), "--object-store-memory",
               str(100 * 2**20), "--include-log-monitor", "false", "--disable-usage-stats", "--block",
               "--min-worker-port", "0", "--max-worker-port", "0",
               *[x for flag, port in zip(per_node, ports) for x in (flag, str(port))]]
        with open(self.tmp / f"{name}.log", "w") as log:
            self.procs.append(subprocess.Popen(cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                               stdin=subprocess.DEVNULL, start_new_session=True))

    def start(self, timeout: float = 180.0) -> str:
        """Both nodes up and registered; returns the head's address."""
        ports = _free_ports(15)
        self.address = f"127.0.0.1:{ports[0]}"
        self._node("head", "node_a", ports[3:9], ["--head", "--port", str(ports[0]), "--ray-client-server-port",
                                                  str(ports[1]), "--include-dashboard", "false", "--dashboard-port",
                                                  str(ports[2])])
        self._node("worker", "node_b", ports[9:15], ["--address", self.address])
        deadline = time.time() + timeout
        while time.time() < deadline:
            for p in self.procs:
                if p.poll() is not None:
                    pytest.fail(f"`ray start` exited with {p.returncode}:\n{self.logs()}")
            if all("Ray runtime started" in (self.tmp / f"{n}.log").read_text() for n in ("head", "worker")):
                return self.address  # the driver waits until both nodes are registered
            time.sleep(1.0)
        pytest.fail(f"the two Ray nodes did not start within {timeout:.0f} s:\n{self.logs()}")

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-1500:]}" for p in sorted(self.tmp.glob("*.log")))

    def stop(self) -> None:
        """SIGKILL to each node's process group and to every process they started (the actors' workers), by pid."""
        import psutil

        for p in self.procs:
            try:
                self.pids.update(c.pid for c in psutil.Process(p.pid).children(recursive=True))
            except psutil.NoSuchProcess:
                pass
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(timeout=30)
        for pid in self.pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.tmp, ignore_errors=True)


#: The controller of the cluster run, in its own process (the cluster's token; this test's own Ray state untouched):
#: every object it gets from an actor and every call it sends is searched for tensors and measured.
DRIVER = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    sys.path.insert(0, {root!r})
    import cloudpickle, ray
    from corl_bench.config import load_config
    from corl_bench.train import actors
    from corl_bench.train.runner import run
    from tests.test_ray_backend_on_cpu import _tensors
    from tests.test_ray_cluster_on_cpu import _register, _sets

    ray.init(address={address!r}, log_to_driver=False)  # wait until both nodes have registered
    while sum(n["Alive"] for n in ray.nodes()) < 2:
        time.sleep(0.5)
    ray.shutdown()

    received, sent = [], []
    real_get, real_submit = ray.get, actors.RayAgent.submit

    def get(*args, **kwargs):
        out = real_get(*args, **kwargs)
        received.append(out)
        return out

    def submit(self, method, *args, **kwargs):
        sent.append((method, args, kwargs))
        return real_submit(self, method, *args, **kwargs)

    ray.get, actors.RayAgent.submit = get, submit
    _register()
    run_dir = run(load_config(None, _sets(Path({tmp!r}), "cluster", "ray", {address!r})))
    nodes = {{r: n["NodeID"] for n in ray.nodes() if n["Alive"] for r in ("node_a", "node_b") if r in n["Resources"]}}
    items = [x for got in received for x in (got if isinstance(got, list) else [got])]
    sizes = [(len(cloudpickle.dumps(x)), type(x).__name__) for x in items if "Tokenizer" not in type(x).__name__]
    json.dump({{"run_dir": str(run_dir), "nodes": nodes, "driver_pid": __import__("os").getpid(),
               "calls": sorted({{m for m, _, _ in sent}}), "received": len(items), "largest": max(sizes),
               "tensors": _tensors(received, "received") + _tensors(sent, "sent")}}, open({report!r}, "w"))
""")


@pytest.mark.slow
def test_two_agents_on_two_ray_nodes_equal_the_local_run(tmp_path):
    pytest.importorskip("ray", reason="run.backend=ray needs Ray (pip install -e '.[ray]'); the test extra has it")
    from corl_bench.results import RunDir
    from corl_bench.train.checkpoint import fingerprint_diff, latest_checkpoint, run_fingerprint
    from corl_bench.train.runner import run

    _register()
    local = run(load_config(None, _sets(tmp_path, "local", "local")))  # also warms the tiny models' cache
    cluster = Cluster()
    report = tmp_path / "driver.json"
    try:
        address = cluster.start()
        env = {**cluster.env, "PYTHONPATH": os.pathsep.join([str(ROOT), cluster.env.get("PYTHONPATH", "")])}
        driver = subprocess.run([sys.executable, "-c", DRIVER.format(root=str(ROOT), tmp=str(tmp_path),
                                                                     address=address, report=str(report))],
                                cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        assert driver.returncode == 0, f"the cluster run failed:\n{driver.stderr[-3000:]}\n{cluster.logs()}"
    finally:
        cluster.stop()
    out = json.loads(report.read_text())
    run_dir = Path(out["run_dir"])

    # the same run as on the local backend: metrics, samples, predictions, final weights, run.json
    assert fingerprint_diff(run_fingerprint(local), run_fingerprint(run_dir)) == []
    record = RunDir(run_dir).record()
    assert record.finished and RunDir(local).record().comparable() == record.comparable()

    # each agent on its own node: the one that advertises the resource it asked for
    actors = record.actors
    assert set(out["nodes"]) == {"node_a", "node_b"} and out["nodes"]["node_a"] != out["nodes"]["node_b"]
    assert actors["a0"]["node"] == out["nodes"]["node_a"] and actors["a1"]["node"] == out["nodes"]["node_b"]
    assert actors["a0"]["resources"]["node_a"] == 1 and actors["a1"]["resources"]["node_b"] == 1
    assert RunDir(local).record().actors is None  # recorded for Ray actors only

    # each checkpoint file written by its agent's actor, on its node (not by the controller)
    checkpoint = latest_checkpoint(run_dir)
    assert checkpoint is not None and checkpoint.name == "step-000002"
    writers = json.loads((checkpoint / "writers.json").read_text())
    for name in ("a0", "a1"):
        w = writers[name]
        assert (w["node"], w["pid"]) == (actors[name]["node"], actors[name]["pid"]) != ("", out["driver_pid"])
        assert w["bytes"] == (checkpoint / w["file"]).stat().st_size > 0

    # the controller never holds a tensor; what it receives is small beside an agent's state
    assert {"generate", "score", "update", "checkpoint", "save"} <= set(out["calls"]) and out["received"] > 10
    assert out["tensors"] == []
    smallest_state = min(w["bytes"] for w in writers.values())
    assert out["largest"][0] < smallest_state / 10, (out["largest"], smallest_state)
