"""The VLMEvalKit bridge: our specs -> VLMEvalKit dataset names, VLMEvalKit prediction records -> our prediction
rows (graded by the spec), the one-line error without the extra, and — where VLMEvalKit imports — that its API and
dataset names are the ones the bridge uses. VLMEvalKit does not import next to the CPU-only torch of this project's
environment: that test skips with the import's own one-line message. ``corl-bench eval --engine vlmevalkit``: its
one-line refusals (text benchmarks, options VLMEvalKit ignores, no VLMEvalKit), the model class of a checkpoint, and
the route through the bridge with VLMEvalKit replaced by a stand-in that records what it is asked."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from corl_bench.config import ConfigError
from corl_bench.eval.evaluator import row_grader
from corl_bench.eval.specs import get_spec
from corl_bench.eval.vlmevalkit_bridge import (DATASETS, MATHVERSE_VERSIONS, dataset_name, prediction_rows,
                                               require_vlmeval)
from corl_bench.eval.wemath import from_rows


def test_every_multimodal_spec_maps_to_a_vlmevalkit_dataset():
    assert DATASETS == {"mathvision": "MathVision", "mathvision_testmini": "MathVision_MINI",
                        "mathverse_testmini": "MathVerse_MINI", "mathvista_testmini": "MathVista_MINI",
                        "wemath_testmini": "WeMath"}
    for name in DATASETS:
        get_spec(name)  # every mapped name is a registered spec
    assert dataset_name("mathverse_testmini", "Vision Only") == "MathVerse_MINI_Vision_Only"
    for bad, args in (("gsm8k", ()), ("mathverse_testmini_text_only", ()), ("mathvision", ("Vision Only",))):
        with pytest.raises(ConfigError) as e:
            dataset_name(bad, *args)
        assert "\n" not in str(e.value)


def test_vlmevalkit_records_become_our_rows_graded_by_the_spec():
    spec = get_spec("wemath_testmini")
    nan = float("nan")
    records = [
        {"index": 0, "question": "OA = ?", "answer": "B", "prediction": "... \\boxed{B}", "A": "300", "B": "400",
         "C": "No correct answer", "D": nan, "ID": "2steps_1", "key": "2steps_1"},
        {"index": 1, "question": "AB = ?", "answer": "A", "prediction": "so \\boxed{300}", "A": "300", "B": "400",
         "C": nan, "ID": "2steps_1", "key": "2steps_2"},
        {"index": 2, "question": "OB = ?", "answer": "C", "prediction": nan, "A": "1", "B": "2", "C": "3",
         "ID": "2steps_1", "key": "2steps_multi"},
    ]
    rows = prediction_rows(spec, records, "WeMath")
    assert [r["problem_id"] for r in rows] == ["WeMath-0", "WeMath-1", "WeMath-2"]
    assert [r["correct"] for r in rows] == [True, True, False]        # letter; value of option A; no prediction
    assert rows[0]["choices"] == ["300", "400", "No correct answer"] and rows[1]["choices"] == ["300", "400"]
    assert rows[2]["completion"] == "" and rows[2]["extracted"] is None
    assert all(r["decoding"] == "greedy" and r["source"] == "vlmevalkit:WeMath" for r in rows)
    grade = row_grader(spec)
    assert [grade(r)[1] for r in rows] == [r["correct"] for r in rows]   # `corl-bench table` agrees
    assert from_rows(rows)["counts"]["IG"] == 1                           # sub right, multi wrong
    with pytest.raises(ConfigError, match="no index/prediction column"):
        prediction_rows(spec, [{"question": "q"}], "WeMath")


def test_without_the_extra_the_bridge_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "vlmeval", None)  # `import vlmeval` raises ImportError
    with pytest.raises(ConfigError) as e:
        require_vlmeval()
    msg = str(e.value)
    assert "\n" not in msg and "pip install -e '.[vlmevalkit]'" in msg and "does not import here" in msg


def vlmeval_or_skip():
    try:
        import vlmeval  # noqa: F401
    except Exception as e:  # noqa: BLE001 - any import failure is the skip reason
        pytest.skip(" ".join(f"{type(e).__name__}: {e}".split())[:300])
    return vlmeval


def test_vlmevalkit_knows_our_datasets_and_the_api_the_bridge_calls():
    vlmeval_or_skip()
    from vlmeval.dataset import SUPPORTED_DATASETS, build_dataset  # noqa: F401
    from vlmeval.inference import infer_data_job  # noqa: F401
    from vlmeval.smp import get_pred_file_path, load  # noqa: F401
    import vlmeval.vlm as vlm

    for name in [*DATASETS.values(), *MATHVERSE_VERSIONS.values()]:
        assert name in SUPPORTED_DATASETS, name
    assert hasattr(vlm, "Qwen2VLChat") and hasattr(vlm, "InternVLChat")
    assert get_pred_file_path("w", "m", "WeMath", use_env_format=False).endswith("m_WeMath.xlsx")


# ------------------------------------------------------------------------------ corl-bench eval --engine vlmevalkit
def model_folder(path, model_type="qwen2_5_vl"):
    """A checkpoint folder as far as the bridge reads it (config.json's model_type; the stand-in loads nothing)."""
    import json

    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"model_type": model_type}))
    return path


@pytest.mark.parametrize("benchmarks, kw, match", [
    (["gsm8k", "mathvision_testmini"], {}, r"^gsm8k: --engine vlmevalkit scores image benchmarks only"),
    (["mathverse_testmini_text_only"], {}, "scores image benchmarks only"),
    (["mathvision_testmini"], {"max_problems": 2, "overrides": {"samples": None, "max_new_tokens": 8}},
     "VLMEvalKit's own datasets and settings; drop --max-problems, --max-new-tokens"),
    (["mathvision_testmini"], {"extractor": "answer_tag"}, "drop --extractor"),
    (["mathvision_testmini"], {}, r"does not import here .*pip install -e '\.\[vlmevalkit\]'"),
])
def test_engine_vlmevalkit_refuses_in_one_line_before_anything_loads(benchmarks, kw, match, monkeypatch, tmp_path):
    from corl_bench.eval import data, targets

    monkeypatch.setitem(sys.modules, "vlmeval", None)  # not installed (as on this machine)
    monkeypatch.setattr(data, "load_rows", lambda *a, **k: pytest.fail("data loaded before the options were checked"))
    folder = model_folder(tmp_path / "ckpt")
    with pytest.raises(ConfigError, match=match) as e:
        targets.run_eval(str(folder), benchmarks, engine="vlmevalkit", out=tmp_path / "out", **kw)
    assert "\n" not in str(e.value) and not (tmp_path / "out").exists()


def test_the_cli_names_the_install_for_engine_vlmevalkit(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from corl_bench.cli import app

    monkeypatch.setitem(sys.modules, "vlmeval", None)
    monkeypatch.setenv("COLUMNS", "400")
    res = CliRunner().invoke(app, ["eval", str(model_folder(tmp_path / "ckpt")), "-b", "wemath_testmini",
                                   "--engine", "vlmevalkit", "--out", str(tmp_path / "out")])
    assert res.exit_code == 2 and "pip install -e '.[vlmevalkit]'" in res.output
    assert "ours | lm-eval | vlmevalkit" in CliRunner().invoke(app, ["eval", "--help"]).output


def test_models_the_bridge_can_hand_to_vlmevalkit(tmp_path):
    from corl_bench.eval.vlmevalkit_bridge import model_class, model_path

    assert model_class(model_folder(tmp_path / "a", "qwen2_vl")) == ("Qwen2VLChat", {})
    assert model_class(model_folder(tmp_path / "b", "internvl_chat")) == ("InternVLChat", {"version": "V2.0"})
    for bad in ("internvl", "llama"):  # transformers' InternVL layout is not what VLMEvalKit's InternVLChat loads
        with pytest.raises(ConfigError, match=f"model type '{bad}'") as e:
            model_class(model_folder(tmp_path / bad, bad))
        assert "\n" not in str(e.value)
    # Qwen2VLChat picks the Qwen2.5-VL class by the path's name: a checkpoint whose path does not say so is linked
    plain = model_folder(tmp_path / "final" / "a0")
    link = Path(model_path(plain, tmp_path / "work"))
    assert link.name == "a0-qwen2_5_vl" and link.resolve() == plain.resolve()
    assert model_path(plain, tmp_path / "work") == str(link)                       # made once
    named = model_folder(tmp_path / "Qwen2.5-VL-3B-Instruct")
    assert model_path(named, tmp_path / "work") == str(named)
    assert model_path(tmp_path / "a", tmp_path / "work") == str(tmp_path / "a")   # Qwen2-VL as it is


class StandInVLMEvalKit:
    """``vlmeval`` as the bridge calls it (open-compass/VLMEvalKit @ e8e78f0): ``vlm.<Class>(model_path=...)``,
    ``dataset.build_dataset``, ``inference.infer_data_job`` (writes ``<work_dir>/<model>_<dataset>.xlsx``; here a
    JSON file), ``smp.get_pred_file_path`` / ``smp.load``; it records what it was asked."""

    RECORDS = {
        "MathVision_MINI": [
            {"index": 4, "question": "How many digits?", "answer": "6", "prediction": "so \\boxed{6}"},
            {"index": 6, "question": "Which picture?", "answer": "D", "prediction": "\\boxed{C}", "A": "A",
             "B": "B", "C": "C", "D": "D", "E": "E"}],
        "WeMath": [
            {"index": 0, "question": "OA = ?", "answer": "B", "prediction": "\\boxed{B}", "A": "300", "B": "400",
             "ID": "2steps_1", "key": "2steps_1"},
            {"index": 1, "question": "AB = ?", "answer": "A", "prediction": "\\boxed{300}", "A": "300", "B": "400",
             "ID": "2steps_1", "key": "2steps_2"},
            {"index": 2, "question": "OB = ?", "answer": "C", "prediction": "\\boxed{A}", "A": "1", "B": "2",
             "C": "3", "ID": "2steps_1", "key": "2steps_multi"}],
    }

    def __init__(self, monkeypatch):
        import json
        import types

        self.built, self.jobs = [], []
        root = types.ModuleType("vlmeval")
        mods = {name: types.ModuleType(f"vlmeval.{name}") for name in ("vlm", "dataset", "inference", "smp")}
        stand_in = self

        class Qwen2VLChat:
            def __init__(self, model_path, **kwargs):
                stand_in.built.append((model_path, kwargs))

        def infer_data_job(model, work_dir, model_name, dataset):
            self.jobs.append(dataset.name)
            Path(mods["smp"].get_pred_file_path(work_dir, model_name, dataset.name)).write_text(
                json.dumps(self.RECORDS[dataset.name]))
            return model

        class Frame(list):
            def to_dict(self, orient):
                assert orient == "records"
                return list(self)

        mods["vlm"].Qwen2VLChat = Qwen2VLChat
        mods["dataset"].build_dataset = lambda name: types.SimpleNamespace(name=name)
        mods["inference"].infer_data_job = infer_data_job
        mods["smp"].get_pred_file_path = lambda work_dir, model_name, name: f"{work_dir}/{model_name}_{name}.json"
        mods["smp"].load = lambda path: Frame(json.loads(Path(path).read_text()))
        monkeypatch.setitem(sys.modules, "vlmeval", root)
        for name, mod in mods.items():
            setattr(root, name, mod)
            monkeypatch.setitem(sys.modules, f"vlmeval.{name}", mod)


def test_engine_vlmevalkit_routes_image_benchmarks_through_the_bridge(monkeypatch, tmp_path):
    """With VLMEvalKit replaced by a stand-in: `corl-bench eval --engine vlmevalkit` hands the checkpoint to the
    model class of its type, writes our rows next to a manifest that records the engine, reports the scores (and
    We-Math's metrics), re-runs without asking VLMEvalKit again, and `corl-bench table` re-grades to the same."""
    import csv
    import io
    import json
    import re

    from typer.testing import CliRunner

    from corl_bench.cli import app
    from corl_bench.eval.targets import check_manifest

    kit = StandInVLMEvalKit(monkeypatch)
    monkeypatch.setenv("COLUMNS", "400")
    folder, out = model_folder(tmp_path / "ckpt"), tmp_path / "out"
    args = ["eval", str(folder), "-b", "mathvision_testmini,wemath_testmini", "--engine", "vlmevalkit",
            "--out", str(out)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    agent_dir = out / "eval" / "final" / "ckpt"
    assert kit.built == [(str(agent_dir / "vlmevalkit" / "ckpt-qwen2_5_vl"), {})]
    assert kit.jobs == ["MathVision_MINI", "WeMath"]
    rows = [json.loads(x) for x in (agent_dir / "mathvision_testmini.jsonl").read_text().splitlines()]
    assert [(r["problem_id"], r["correct"], r["source"]) for r in rows] == [
        ("MathVision_MINI-4", True, "vlmevalkit:MathVision_MINI"), ("MathVision_MINI-6", False,
                                                                     "vlmevalkit:MathVision_MINI")]
    manifest = json.loads((agent_dir / "eval_manifest.json").read_text())
    assert {m["engine"] for m in manifest.values()} == {"vlmevalkit"} and set(manifest) == {
        "mathvision_testmini", "wemath_testmini"}
    assert re.search(r"ckpt mathvision_testmini@1: n=2 k=0 .*greedy=50\.0", res.output)
    assert re.search(r"ckpt wemath_testmini@1: n=3 k=0 .*greedy=66\.7", res.output)
    assert re.search(r"ckpt wemath_testmini@1: We-Math \(1 problems, greedy\).* IK 0.0 IG 100.0", res.output)

    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0 and kit.jobs == ["MathVision_MINI", "WeMath"] and len(kit.built) == 1
    assert re.findall(r"ckpt \S+: n=.*", again.output) == re.findall(r"ckpt \S+: n=.*", res.output)

    table = CliRunner().invoke(app, ["table", "-r", str(out), "--metric", "greedy", "--format", "csv"])
    got = next(csv.DictReader(io.StringIO(table.output)))
    assert float(got["mathvision_testmini greedy"]) == pytest.approx(50.0)
    assert float(got["wemath_testmini greedy"]) == pytest.approx(200 / 3, abs=1e-3)
    # our engine's rows never join VLMEvalKit's
    with pytest.raises(ConfigError, match="different engine"):
        check_manifest(agent_dir, get_spec("wemath_testmini"), get_spec("wemath_testmini").decoding, str(folder),
                       "ours")
