"""Benchmarks, extractors, graders and data converters as registries (issue 23.6), and the study's claims as data.

A plugin package (a dist-info with entry points, on a path of its own) adds an extractor, a grader and a converter that
a spec then names; unknown names and bad spec files fail in one line naming the file, the field and the fix; every
shipped ``benchmarks/*.yaml`` is a frozen :class:`BenchmarkSpec`; the data loader follows the spec's converter; and
``corl_bench/report/claims.yaml`` decides which comparisons the study makes.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap
from importlib import resources
from pathlib import Path

import pytest

from corl_bench.config import ConfigError
from corl_bench.eval.converters import Converter
from corl_bench.eval.data import frozen_file, load_rows
from corl_bench.eval.specs import BenchmarkSpec, parse_spec, spec_from_yaml
from corl_bench.registries import BENCHMARKS, CONVERTERS, EXTRACTORS, GRADERS
from corl_bench.report.study import AgentScores, Cell, Claim, claim_comparisons, load_claims, to_markdown

ROOT = Path(__file__).resolve().parents[1]

PLUGIN = '''
"""corl-plugin-spec: an extractor, a grader (that wants the options) and a data converter."""

from corl_bench.eval.converters import Converter


def last_word(text):
    words = (text or "").split()
    return words[-1].strip(".").lower() if words else None


def loose(pred, gold, choices=None):
    return pred is not None and (pred == str(gold).lower() or (choices is not None and pred in choices))


loose.uses_choices = True
TOYSET = Converter("toyset", hub_paths=("toy/set",), convert=lambda spec, records: [dict(r) for r in records])
'''
ENTRY_POINTS = """
[corl_bench.extractors]
last_word = corl_plugin_spec:last_word

[corl_bench.graders]
loose = corl_plugin_spec:loose

[corl_bench.converters]
toyset = corl_plugin_spec:TOYSET
"""
CHECK = '''
import sys
from corl_bench.config import ConfigError
from corl_bench.eval.scoring import grade_text
from corl_bench.eval.specs import parse_spec
from corl_bench.registries import CONVERTERS, EXTRACTORS, GRADERS

assert "last_word" in EXTRACTORS.names() and "loose" in GRADERS.names() and "toyset" in CONVERTERS.names()
assert "corl_plugin_spec" not in sys.modules  # listed, not imported
spec = parse_spec({"name": "toy", "version": "1", "task": "math", "prompt": "{problem}", "extractor": "Last-Word",
                   "grader": "loose", "source": {"hub": {"path": "toy/set"}, "converter": "toyset"}}, "toy.yaml")
assert (spec.extractor, spec.grader, spec.source.converter) == ("last_word", "loose", "toyset"), spec
assert grade_text("so the answer is Seven.", "seven", spec.extractor, spec.grader) == ("seven", True)
assert grade_text("so it is blue", "red", spec.extractor, spec.grader, choices=["blue", "red"]) == ("blue", True)
try:
    parse_spec({"name": "toy", "version": "1", "task": "math", "prompt": "{problem}", "extractor": "last_word",
                "grader": "loose", "source": {"hub": {"path": "toy/set"}}}, "toy.yaml")
except ConfigError as e:
    print(e)
'''


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """An 'installed' plugin distribution: the module and its dist-info (entry points) on a path of its own."""
    root = tmp_path_factory.mktemp("spec-plugin-site")
    (root / "corl_plugin_spec.py").write_text(textwrap.dedent(PLUGIN))
    info = root / "corl_plugin_spec-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: corl-plugin-spec\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    return root


def test_a_plugin_extractor_grader_and_converter_come_from_entry_points(site, tmp_path):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    proc = subprocess.run([sys.executable, "-c", CHECK], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ("toy.yaml: toy.source.converter: the hub dataset toy/set needs the toyset converter "
                                   "(got none); add converter: toyset under source")


def test_the_builtin_extractors_and_graders_are_lazy_and_unknown_names_are_one_line():
    assert {"qwen", "boxed", "flexible", "letter", "code", "answer_tag", "boxed_abcd", "math_verify_number"} <= \
        set(EXTRACTORS.names())
    assert {"math", "exact", "letter", "tests", "mc_letter_or_value", "rel_tol_5pct"} <= set(GRADERS.names())
    code = ("import sys, corl_bench.registries as r\n"
            "r.EXTRACTORS.names(), r.GRADERS.names(), r.CONVERTERS.names(), r.BENCHMARKS.names()\n"
            "loaded = [m for m in ('corl_bench.eval.scoring', 'corl_bench.grading.verifier',"
            " 'corl_bench.eval.data', 'corl_bench.eval.science', 'math_verify',"
            " 'torch') if m in sys.modules]\n"
            "assert not loaded, loaded\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    with pytest.raises(KeyError) as e:
        GRADERS.get("mathh")
    assert str(e.value) == ("unknown grader 'mathh'; did you mean 'math'? valid: exact, letter, math, "
                            "mc_letter_or_value, rel_tol_5pct, tests")


def _raw(**over):
    raw = {"name": "toy", "version": "1", "task": "math", "source": {"local": "toy/test.jsonl"},
           "prompt": "{problem}", "extractor": "boxed", "grader": "math"}
    raw.update(over)
    return raw


@pytest.mark.parametrize("over, match", [
    ({"extractor": "boxd"}, "benchmarks/toy.yaml: toy.extractor: unknown answer extractor 'boxd'; did you mean "
                            "'boxed'?"),
    ({"grader": "vibes"}, "benchmarks/toy.yaml: toy.grader: unknown grader 'vibes'; valid: "),
    ({"source": {"local": "x.jsonl", "converter": "gpqaa"}},
     "benchmarks/toy.yaml: toy.source.converter: unknown data converter 'gpqaa'; did you mean 'gpqa'?"),
    ({"source": {"local": "x.jsonl", "converter": ["gpqa"]}}, "toy.source.converter must be a converter name"),
    ({"source": {"local": "x.jsonl", "hub": {"path": "livecodebench/code_generation_lite"}}},
     "toy.source.converter: the hub dataset livecodebench/code_generation_lite needs the livecodebench converter "
     "(got none); add converter: livecodebench under source"),
    ({"source": {"local": "x.jsonl", "hub": {"path": "Idavidrein/gpqa"}, "converter": "mathvista"}},
     "needs the gpqa converter (got mathvista); add converter: gpqa under source"),
])
def test_a_spec_with_an_unknown_name_fails_in_one_line(over, match):
    with pytest.raises(ConfigError) as e:
        parse_spec(_raw(**over), origin="benchmarks/toy.yaml")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("benchmarks/toy.yaml: ") and match in msg, msg


@pytest.mark.parametrize("text, match", [
    ("name: toy\nversion: [1\n", "benchmarks/bad.yaml is not valid YAML (line "),
    ("- just\n- a list\n", "benchmarks/bad.yaml: a benchmark spec must be a mapping of fields"),
    ("name: toy\nversion: 1\ntask: math\nprompt: '{problem}'\nextractor: boxed\n",
     "benchmarks/bad.yaml: field 'grader' is required; add grader: ..."),
])
def test_a_bad_spec_file_is_one_line_naming_the_file(text, match):
    with pytest.raises(ConfigError) as e:
        spec_from_yaml("benchmarks/bad.yaml", text)
    assert "\n" not in str(e.value) and str(e.value).startswith(match), str(e.value)


def test_every_shipped_benchmark_yaml_is_a_frozen_benchmark_spec():
    files = sorted(f for f in resources.files("corl_bench.benchmarks").iterdir() if f.name.endswith(".yaml"))
    assert len(files) == len(BENCHMARKS.names()) >= 20
    for f in files:
        spec = spec_from_yaml(f"benchmarks/{f.name}", f.read_text(encoding="utf-8"))
        registered = BENCHMARKS.get(spec.name)
        assert isinstance(registered, BenchmarkSpec) and registered == spec, f.name
        with pytest.raises(dataclasses.FrozenInstanceError):
            registered.version = "99"  # type: ignore[misc]
        assert spec.extractor in EXTRACTORS.names() and spec.grader in GRADERS.names()
        conv = spec.source.converter
        assert conv is None or conv in CONVERTERS.names(), f.name
    named = {n: BENCHMARKS.get(n).source.converter for n in BENCHMARKS.names()}
    assert named["gpqa_diamond"] == "gpqa" and named["livecodebench_v6"] == "livecodebench"
    assert named["mathverse_testmini_text_only"] == "mathverse" and named["wemath_testmini"] == "wemath"
    assert named["gsm8k"] is None and named["math500"] is None  # plain columns
    assert frozen_file(BENCHMARKS.get("livecodebench_v6")) == "livecodebench/release_v6.jsonl"


@pytest.fixture
def toy_converter():
    """A converter registered for one test: hub rows come from ``fetch``, a local copy is read by ``read_local``."""
    seen = []

    def fetch(spec):
        seen.append(("fetch", spec.name))
        return [{"id": "h1", "problem": "1+1", "answer": "2"}]

    def read_local(spec, path):
        seen.append(("local", path.name))
        return [{"id": f"l{i}", "problem": line, "answer": line[-1]} for i, line in
                enumerate(path.read_text().split())]

    conv = Converter("toy-conv", hub_paths=("toy/hub",), fetch=fetch, read_local=read_local,
                     frozen_file=lambda spec: "toy/frozen.jsonl", needs="corl_bench_no_such_package")
    CONVERTERS.register("toy-conv", conv)
    yield seen
    CONVERTERS.unregister("toy-conv")


def test_the_data_loader_follows_the_specs_converter(toy_converter, tmp_path, monkeypatch):
    monkeypatch.delenv("CORL_BENCH_DATA", raising=False)
    spec = parse_spec(_raw(source={"local": "toy/raw.txt", "hub": {"path": "toy/hub"}, "converter": "toy_conv"}))
    assert spec.source.converter == "toy-conv" and frozen_file(spec) == "toy/frozen.jsonl"
    assert [r["id"] for r in load_rows(spec, tmp_path)] == ["h1"]  # no local copy: the converter's hub rows
    (tmp_path / "toy").mkdir()
    (tmp_path / "toy" / "raw.txt").write_text("a=1 b=2\n")
    assert [r["answer"] for r in load_rows(spec, tmp_path)] == ["1", "2"]
    assert toy_converter == [("fetch", "toy"), ("local", "raw.txt")]
    plain = parse_spec(_raw(source={"local": "toy/raw.txt", "converter": "columns"}))
    assert frozen_file(plain) == "toy/raw.txt"


# ------------------------------------------------------------------------------------------------ the study's claims
def _scores() -> list[AgentScores]:
    out = []
    for seed, (corl, ttrl, gt) in enumerate([(0.7, 0.5, 0.71), (0.8, 0.5, 0.81), (0.6, 0.3, 0.61)]):
        for method, value in (("corl", corl), ("ttrl", ttrl), ("gt-reward", gt)):
            cohort = "cross-family" if method == "corl" else "single"
            out.append(AgentScores(method, cohort, "", "a0", "qwen2-bpe", seed, {"avg_k": value}, {"avg_k": 0.4}))
    return out


def test_the_shipped_claims_file_drives_the_study(tmp_path):
    claims = load_claims()
    assert len(claims) == 9 and all(isinstance(c, Claim) for c in claims)
    corl = Cell("corl", "cross-family")
    assert claims[0] == Claim("Co-RL above TTRL", corl, Cell("ttrl"), ("qwen2-bpe", "llama-bpe"), 0.0)
    assert claims[1].b == Cell("corl", "cross-family", phase="base")
    assert claims[6] == Claim("Co-RL within 2 points of GT-Reward", corl, Cell("gt-reward"),
                              ("qwen2-bpe", "llama-bpe"), 0.02)
    assert claims[7].b == Cell("ttrl", tag="budget-matched")
    default = [c.claim for c in claim_comparisons(_scores(), metrics=("avg_k",))]
    assert default == ["Co-RL above TTRL", "Co-RL above Base", "Co-RL within 2 points of GT-Reward"]
    # another claims file: only its claims are compared, under its labels and margins
    mine = tmp_path / "claims.yaml"
    mine.write_text("claims:\n  - claim: TTRL above GT\n    a: {method: ttrl}\n    b: {method: gt-reward}\n"
                    "    backbones: [qwen2-bpe]\n    margin: 0.5\n")
    table = to_markdown(claim_comparisons(_scores(), metrics=("avg_k",), claims=load_claims(mine)))
    rows = [line for line in table.splitlines() if line.startswith("| TTRL above GT")]
    assert len(rows) == 1 and rows[0].endswith("| holds |") and "Co-RL" not in table


@pytest.mark.parametrize("text, match", [
    ("claims: []\n", "needs a non-empty list under claims:"),
    ("claims:\n  - {claim: x, a: {method: corl}, b: {method: ttrl}}\n", "claims[0].backbones must be a non-empty list"),
    ("claims:\n  - {claim: x, a: {method: corl, phase: mid}, b: {method: ttrl}, backbones: [q]}\n",
     "claims[0].a.phase must be final or base"),
    ("claims:\n  - {claim: x, a: {method: corl}, b: {cohort: single}, backbones: [q]}\n",
     "claims[0].b must be a mapping with a method"),
    ("claims:\n  - {claim: x, a: {method: corl}, b: {method: ttrl}, backbones: [q], margin: lots}\n",
     "claims[0].margin must be a number"),
    ("claims:\n  - {claim: x, a: {method: corl, seed: 1}, b: {method: ttrl}, backbones: [q]}\n",
     "claims[0].a.seed is not a cell field; valid: method, cohort, tag, phase"),
])
def test_a_bad_claims_file_is_one_line(tmp_path, text, match):
    path = tmp_path / "claims.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_claims(path)
    assert "\n" not in str(e.value) and str(e.value).startswith(f"{path}: ") and match in str(e.value)


def test_claims_yaml_is_package_data():
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert '"claims.yaml"' in pyproject.split("[tool.setuptools.package-data]")[1].split("\n[")[0]
