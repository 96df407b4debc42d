"""LiveCodeBench v6 and GPQA-Diamond from the hub, without the network.

The hub is replaced by small fixture files in the hub layout (``tests/fixtures/hub``: invented rows, not benchmark
data): ``livecodebench/test.jsonl`` (3 rows) ... ``test6.jsonl`` (1 row each) as in
``livecodebench/code_generation_lite``, with base64(zlib(pickle(json))) private tests, and
``gpqa/gpqa_diamond.csv`` (3 rows) with the ``Idavidrein/gpqa`` columns. The download function
(:func:`corl_bench.eval.livecodebench._download`) and ``datasets.load_dataset`` are monkeypatched to return them; two tests
run the real ``hf_hub_download`` against an empty or a hand-made hub cache with the endpoint pointed at a closed local
port. The test marked ``shared_data`` checks the GPQA conversion against the local copy in ../shared/data.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from corl_bench.eval import livecodebench as lcb
from corl_bench.eval.items import build_items
from corl_bench.eval.specs import get_spec, parse_spec
from corl_bench.config import ConfigError
from corl_bench.eval.data import load_rows, prepare
from corl_bench.eval.gpqa import gpqa_rows
from corl_bench.eval.livecodebench import RELEASE_FILES, decode_private
from tests.conftest import SHARED_DATA

pytestmark = pytest.mark.usefixtures("hub_answers")  # the hub's loaders are replaced by stand-ins here

HUB = Path(__file__).resolve().parent / "fixtures" / "hub"
LCB_FILES = HUB / "livecodebench"
GPQA_CSV = HUB / "gpqa" / "gpqa_diamond.csv"
LCB_IDS = ["fix_a1", "fix_a2", "9001", "fix_v2", "fix_v3", "fix_v4", "fix_v5", "fix_v6"]
GPQA_IDS = ["recFixture0000001", "recFixture0000002", "recFixture0000003"]


@pytest.fixture(autouse=True)
def no_local_copies(monkeypatch):
    """Only --data-dir given in a test counts: no $CORL_BENCH_DATA from the environment."""
    monkeypatch.delenv("CORL_BENCH_DATA", raising=False)


@pytest.fixture()
def lcb_hub(monkeypatch):
    """The LiveCodeBench hub repository = the fixture folder; returns the list of requested files."""
    asked: list[tuple[str, str | None]] = []

    def download(filename: str, revision: str | None = None) -> Path:
        asked.append((filename, revision))
        return LCB_FILES / filename

    monkeypatch.setattr(lcb, "_download", download)
    return asked


@pytest.fixture()
def gpqa_hub(monkeypatch, tmp_path):
    """``datasets.load_dataset("Idavidrein/gpqa", name="gpqa_diamond", split="train")`` = the fixture CSV, read by
    the same CSV builder the hub's config uses (floats for the accuracies, strings kept verbatim)."""
    datasets = pytest.importorskip("datasets")
    real = datasets.load_dataset
    calls = []

    def load_dataset(path, name=None, split=None, **kw):
        calls.append((path, name, split))
        assert path == "Idavidrein/gpqa" and name == "gpqa_diamond" and split == "train"
        return real("csv", data_files=str(GPQA_CSV), split="train", cache_dir=str(tmp_path / "hf-datasets"))

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    return calls


def lcb_spec(**hub):
    return parse_spec({"name": "livecodebench_fixture", "version": "1", "task": "code",
                       "source": {"local": "livecodebench", "hub": {"path": lcb.HUB_REPO, **hub},
                                  "converter": "livecodebench"},
                       "prompt": "{problem}", "extractor": "code", "grader": "tests"})


# ------------------------------------------------------------------------------------------------ LiveCodeBench
def test_the_release_table_adds_one_file_per_release():
    assert RELEASE_FILES["release_v1"] == ("test.jsonl",)
    assert RELEASE_FILES["release_v6"] == ("test.jsonl", "test2.jsonl", "test3.jsonl", "test4.jsonl", "test5.jsonl",
                                           "test6.jsonl")
    for n in range(2, 7):
        assert RELEASE_FILES[f"release_v{n}"] == RELEASE_FILES[f"release_v{n - 1}"] + (f"test{n}.jsonl",)
    spec = get_spec("livecodebench_v6")
    assert dict(spec.source.hub) == {"path": "livecodebench/code_generation_lite", "version_tag": "release_v6"}


def test_hub_rows_of_release_v6_read_all_six_files_and_carry_their_tests(lcb_hub):
    spec = get_spec("livecodebench_v6")
    rows = load_rows(spec)
    assert [name for name, _ in lcb_hub] == list(RELEASE_FILES["release_v6"])
    assert [r["id"] for r in rows] == LCB_IDS
    assert all(r["tests"] and r["n_public"] == 1 for r in rows)
    first = rows[0]
    raw = json.loads((LCB_FILES / "test.jsonl").read_text().splitlines()[0])
    assert first["tests"] == json.loads(raw["public_test_cases"]) + decode_private(raw["private_test_cases"])
    assert first["tests"] == [{"input": "1 2\n", "output": "3\n", "testtype": "stdin"},
                              {"input": "2 4\n", "output": "6\n", "testtype": "stdin"},
                              {"input": "3 5\n", "output": "8\n", "testtype": "stdin"}]
    functional = rows[2]
    assert functional["func_name"] == "sumOfList" and functional["starter_code"].startswith("class Solution:")
    assert [t["testtype"] for t in functional["tests"]] == ["functional"] * 3
    items = build_items(spec, rows)
    assert [it.meta["kind"] for it in items] == ["livecodebench"] * 8
    assert items[2].meta["tests"] == functional["tests"] and "Use this starter code" in items[2].problem


def test_release_v1_reads_only_test_jsonl_and_a_revision_is_passed_on(lcb_hub):
    rows = load_rows(lcb_spec(version_tag="release_v1", revision="abc123"))
    assert lcb_hub == [("test.jsonl", "abc123")]
    assert [r["id"] for r in rows] == LCB_IDS[:3]


def test_hub_rows_equal_the_rows_of_a_local_folder_of_the_same_files(lcb_hub):
    spec = get_spec("livecodebench_v6")
    hub_rows = load_rows(spec)
    local_rows = load_rows(spec, HUB)  # HUB/livecodebench/ holds the six files: the local folder layout
    assert len(lcb_hub) == 6  # only the hub load asked
    assert local_rows == hub_rows


@pytest.mark.parametrize("hub, match", [
    ({"version_tag": "release_v9"}, "unknown LiveCodeBench release 'release_v9'; valid: release_v1, "),
    ({"version_tag": "release_v6", "split": "test", "trust_remote_code": True},
     "source.hub.split is not used for livecodebench/code_generation_lite .*valid: path, version_tag, revision"),
])
def test_a_bad_livecodebench_hub_spec_is_one_line(lcb_hub, hub, match):
    with pytest.raises(ConfigError, match=match) as e:
        load_rows(lcb_spec(**hub))
    assert "\n" not in str(e.value) and lcb_hub == []


def test_without_huggingface_hub_the_error_names_the_local_folder_layout(monkeypatch):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # `import huggingface_hub` raises ImportError
    with pytest.raises(ConfigError) as e:
        load_rows(get_spec("livecodebench_v6"))
    msg = str(e.value)
    assert "\n" not in msg and "`huggingface_hub` is not installed" in msg and "pip install huggingface_hub" in msg
    assert "--data-dir DIR" in msg and "DIR/livecodebench/ holds the release_v6 files" in msg
    assert "test.jsonl ... test6.jsonl" in msg


@pytest.fixture()
def offline_hub(monkeypatch, tmp_path):
    """The real ``hf_hub_download``, offline, with an empty hub cache and the endpoint at a closed local port."""
    constants = pytest.importorskip("huggingface_hub.constants")
    cache = tmp_path / "hub-cache"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")
    return cache


def test_offline_without_a_cached_copy_is_a_one_line_error(offline_hub):
    with pytest.raises(ConfigError) as e:
        load_rows(get_spec("livecodebench_v6"))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("LiveCodeBench release_v6: could not get test.jsonl from the hub")
    assert "--data-dir DIR" in msg and "frozen release_v6.jsonl" in msg


def test_offline_the_hub_cache_is_used(offline_hub):
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = offline_hub / "datasets--livecodebench--code_generation_lite"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    (repo / "snapshots" / commit).mkdir(parents=True)
    (repo / "snapshots" / commit / "test.jsonl").write_bytes((LCB_FILES / "test.jsonl").read_bytes())
    rows = load_rows(lcb_spec(version_tag="release_v1"))
    assert [r["id"] for r in rows] == LCB_IDS[:3] and all(r["tests"] for r in rows)


# ------------------------------------------------------------------------------------------------ GPQA
def test_gpqa_hub_rows_are_converted_in_the_papers_choice_order(gpqa_hub):
    spec = get_spec("gpqa_diamond")
    rows = load_rows(spec)
    assert gpqa_hub == [("Idavidrein/gpqa", "gpqa_diamond", "train")]
    assert [r["id"] for r in rows] == GPQA_IDS and [r["row_index"] for r in rows] == [0, 1, 2]
    # Co-RL process_docs_gpqa: [Incorrect 1, 2, 3, Correct], cleaned, random.Random(row_index).shuffle
    assert [r["corl_choices"] for r in rows] == [["1", "3", "11", "2"],
                                                 ["Neon", "Oxygen. gas", "Carbon", "Nitrogen gas"],
                                                 ["Mass", "Energy", "Velocity", "Speed"]]
    assert [r["corl_answer_letter"] for r in rows] == ["D", "A", "C"]
    # the local copy's schema: question and choices ([Correct, Incorrect 1, 2, 3]) verbatim, metadata as strings
    assert rows[0]["question"] == "Fixture question one: what is 1+1?\n"
    assert rows[1]["choices"] == [" Neon ", "Oxygen [title] gas", "Nitrogen  gas", "Carbon"]
    assert (rows[0]["answer_index"], rows[0]["answer_letter"]) == (0, "A")
    assert rows[0]["expert_validator_accuracy"] == "1.0" and rows[0]["non_expert_validator_accuracy"] == \
        "0.3333333333333333"
    assert (rows[2]["domain"], rows[2]["subdomain"]) == ("Physics", "Physics (general)")
    items = build_items(spec, rows)
    assert items[0].problem == "Fixture question one: what is 1+1?\n\n(A) 1\n(B) 3\n(C) 11\n(D) 2"
    assert [it.gold for it in items] == ["D", "A", "C"]


def test_gpqa_conversion_handles_a_missing_option_like_the_paper():
    rec = {"Record ID": "r0", "Question": "Q?", "Correct Answer": "yes", "Incorrect Answer 1": "no",
           "Incorrect Answer 2": None, "Incorrect Answer 3": "maybe"}
    row = gpqa_rows([rec])[0]
    assert sorted(row["corl_choices"]) == [" ", "maybe", "no", "yes"]  # process_docs_gpqa: None -> " "
    assert row["corl_choices"][ord(row["corl_answer_letter"]) - 65] == "yes"
    assert "domain" not in row  # metadata only where the hub rows have it


def test_gpqa_rows_in_another_layout_are_refused_with_one_line_naming_the_local_copy(monkeypatch):
    datasets = pytest.importorskip("datasets")
    other = [json.loads(line) for line in (HUB / "gpqa" / "other_layout.jsonl").read_text().splitlines()]
    monkeypatch.setattr(datasets, "load_dataset", lambda path, **kw: other)
    with pytest.raises(ConfigError) as e:
        load_rows(get_spec("gpqa_diamond"))
    msg = str(e.value)
    assert "\n" not in msg and "no 'Record ID' column (another layout than Idavidrein/gpqa)" in msg
    assert "--data-dir DIR (or $CORL_BENCH_DATA) with DIR/gpqa_diamond_orig/test.jsonl" in msg


def test_the_gated_hub_set_fails_with_one_line_naming_the_local_copy(monkeypatch):
    datasets = pytest.importorskip("datasets")

    def gated(path, **kw):
        raise PermissionError("Dataset 'Idavidrein/gpqa' is a gated dataset on the Hub.\nVisit the page to ask.")

    monkeypatch.setattr(datasets, "load_dataset", gated)
    with pytest.raises(ConfigError) as e:
        load_rows(get_spec("gpqa_diamond"))
    msg = str(e.value)
    assert "\n" not in msg and "could not load Idavidrein/gpqa from the hub (PermissionError: Dataset" in msg
    assert msg.endswith("pass --data-dir DIR (or set $CORL_BENCH_DATA) with DIR/gpqa_diamond_orig/test.jsonl")


@pytest.mark.shared_data
def test_gpqa_conversion_reproduces_the_local_copy_row_for_row():
    local = SHARED_DATA / "gpqa_diamond_orig" / "test.jsonl"
    if not local.is_file():
        pytest.skip(f"{local} is absent (offline benchmark copies live in {SHARED_DATA} on the project machines)")
    spec = get_spec("gpqa_diamond")
    rows = load_rows(spec, SHARED_DATA)
    # the hub layout, rebuilt from the local copy's verbatim fields (its `choices` = [Correct, Incorrect 1, 2, 3];
    # accuracies as the floats the hub's CSV loader gives)
    hub = [{"Record ID": r["id"], "Question": r["question"], "Correct Answer": r["choices"][0],
            "Incorrect Answer 1": r["choices"][1], "Incorrect Answer 2": r["choices"][2],
            "Incorrect Answer 3": r["choices"][3], "High-level domain": r["domain"], "Subdomain": r["subdomain"],
            "Writer's Difficulty Estimate": r["writer_difficulty"], "Explanation": r["explanation"],
            "Expert Validator Accuracy": float(r["expert_validator_accuracy"]),
            "Non-Expert Validator Accuracy": float(r["non_expert_validator_accuracy"]), "Canary String": r["canary"]}
           for r in rows]
    converted = gpqa_rows(hub)
    assert len(converted) == 198
    assert converted == rows  # every field, the paper's order and gold letter included
    assert [(it.id, it.problem, it.gold) for it in build_items(spec, converted)] == \
        [(it.id, it.problem, it.gold) for it in build_items(spec, rows)]


# ------------------------------------------------------------------------------------------------ prepare
def test_prepare_freezes_the_converted_hub_rows_and_they_load_back_identically(lcb_hub, gpqa_hub, tmp_path):
    specs = [get_spec("livecodebench_v6"), get_spec("gpqa_diamond")]
    hub_rows = {s.name: load_rows(s) for s in specs}
    dest = tmp_path / "frozen"
    manifest = prepare(specs, dest)
    assert manifest["benchmarks"] == {
        "livecodebench_v6": {"version": "1", "file": "livecodebench/release_v6.jsonl", "rows": 8},
        "gpqa_diamond": {"version": "1", "file": "gpqa_diamond_orig/test.jsonl", "rows": 3}}
    assert sorted(manifest["files"]) == ["gpqa_diamond_orig/test.jsonl", "livecodebench/release_v6.jsonl"]
    calls = (len(lcb_hub), len(gpqa_hub))
    for spec in specs:
        frozen = load_rows(spec, dest)
        assert frozen == hub_rows[spec.name]
        assert build_items(spec, frozen) == build_items(spec, hub_rows[spec.name])
    assert (len(lcb_hub), len(gpqa_hub)) == calls  # the frozen copy did not touch the hub
    target = dest / "livecodebench" / "release_v6.jsonl"
    target.write_text(target.read_text().replace('"3\\n"', '"4\\n"', 1))
    with pytest.raises(ConfigError, match="release_v6.jsonl does not match its checksum"):
        load_rows(specs[0], dest)


def test_cli_data_prepare_freezes_both_sets(lcb_hub, gpqa_hub, tmp_path):
    from typer.testing import CliRunner

    from corl_bench.cli import app

    dest = tmp_path / "frozen"
    r = CliRunner().invoke(app, ["data", "prepare", "-b", "livecodebench_v6,gpqa_diamond", "--dest", str(dest)])
    assert r.exit_code == 0, r.output
    assert "livecodebench_v6@1: 8 rows" in r.output and "gpqa_diamond@1: 3 rows" in r.output
    assert [r["id"] for r in load_rows(get_spec("livecodebench_v6"), dest)] == LCB_IDS
    assert [r["id"] for r in load_rows(get_spec("gpqa_diamond"), dest)] == GPQA_IDS
