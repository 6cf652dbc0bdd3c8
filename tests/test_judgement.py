"""Typed judgement (schema/judgement.py, calibration.py, run_meta.py): every verdict's words come
from its type, combinations no judgement makes are refused, calibrations and run metadata are
checked on load (older files still load), and the JSON carries the typed fields beside the words."""
import json

import pytest

from reports.calibration import calibrate
from reports.compare import compare
from reports.gate import judge_history, judge_pair
from reports.result_files import load
from schema.calibration import Calibration
from schema.exit_codes import ExitCode
from schema.judgement import Cause, Direction, GateResult, Samples, Verdict
from schema.results import ResultError
from tests.test_compare import write_ab, write_run
from tests.test_history import nightly, runs_of

REG, IMP = Direction.REGRESSION, Direction.IMPROVEMENT


@pytest.mark.parametrize("verdict, words", [
    (Verdict(REG, confirmed=True), "regression"),
    (Verdict(IMP, confirmed=True, cause=Cause.HISTORY), "improvement"),
    (Verdict(Direction.NO_CHANGE, confirmed=True), "no change"),
    (Verdict(), "inconclusive"),
    (Verdict(REG), "suspected regression"),
    (Verdict(IMP, cause=Cause.HISTORY, newest=True), "suspected improvement"),
    (Verdict(REG, confirmed=True, standing=True, cause=Cause.HISTORY), "standing regression"),
    (Verdict(IMP, confirmed=True, standing=True, cause=Cause.SAME_NIGHT_AB), "standing improvement"),
    (Verdict(REG, confirmed=True, cause=Cause.CANARY), "machine regression"),
    (Verdict(REG, confirmed=True, cause=Cause.STACKS_ALIKE), "machine regression"),
    (Verdict(IMP, confirmed=True, cause=Cause.KEPT_STACK), "machine improvement"),
    (Verdict(REG, confirmed=True, cause=Cause.SAME_NIGHT_AB, newest=True), "regression (confirmed by A/B)"),
])
def test_each_verdict_says_its_words(verdict, words):
    assert verdict.text() == words
    assert verdict.to_json()["machine"] == (verdict.cause in (Cause.CANARY, Cause.KEPT_STACK, Cause.STACKS_ALIKE))


@pytest.mark.parametrize("fields", [
    {"direction": Direction.INCONCLUSIVE, "confirmed": True},
    {"direction": Direction.NO_CHANGE},
    {"direction": REG, "standing": True},                                    # a suspicion cannot stand
    {"direction": Direction.NO_CHANGE, "confirmed": True, "cause": Cause.CANARY},
    {"direction": REG, "confirmed": True, "standing": True, "cause": Cause.CANARY},
    {"direction": REG, "confirmed": True, "newest": True, "cause": Cause.HISTORY},
])
def test_a_verdict_no_judgement_makes_is_refused(fields):
    with pytest.raises(ValueError):
        Verdict(**fields)


def test_a_calibration_round_trips_and_is_checked_on_load(tmp_path):
    cal = calibrate(load(write_run(tmp_path / "a.json", 1, launches=3)), load(write_run(tmp_path / "b.json", 2, launches=3)))
    assert Calibration.from_json(json.loads(json.dumps(cal.to_json())), "cal.json") == cal
    old = {"a": "x", "b": "y", "bands": {"mpi small (<= 8 KiB)": {"min_effect": 0.08}}}   # before samples and --estimator
    loaded = Calibration.from_json(old, "old.json")
    assert (loaded.samples, loaded.estimator, loaded.min_effect("mpi small (<= 8 KiB)"), loaded.min_effect("other")) == \
        ("launches", "median", 0.08, 0.0)
    assert loaded.samples is Samples.LAUNCHES
    assert Calibration.from_json({**old, "samples": "rounds"}, "r.json").samples is Samples.ROUNDS
    with pytest.raises(ResultError, match=r"odd.json.samples must be one of rounds, launches, paired launches, .* not 'draws'"):
        Calibration.from_json({**old, "samples": "draws"}, "odd.json")
    with pytest.raises(ResultError, match=r"bad.json.bands.mpi small \(<= 8 KiB\).min_effect must be a finite number >= 0"):
        Calibration.from_json({"bands": {"mpi small (<= 8 KiB)": {"min_effect": "5%"}}}, "bad.json")


def test_run_metadata_is_typed_and_checked_where_a_run_is_loaded(tmp_path):
    path = write_run(tmp_path / "r.json", 1, options={"min_effect": 0.02, "estimator": "min", "repeat": 3})
    meta = load(path).meta
    assert meta.options is not None and (meta.options.min_effect, meta.options.estimator, meta.options.repeat) == (0.02, "min", 3)
    assert load(write_run(tmp_path / "old.json", 1)).meta.options is None   # no options: an older file, an import
    data = json.loads((tmp_path / "r.json").read_text())
    data["hccl_bench"]["options"]["min_effect"] = "2%"
    (tmp_path / "bad.json").write_text(json.dumps(data))
    with pytest.raises(ResultError, match=r"bad.json: hccl_bench.options.min_effect must be a finite number, found 2%"):
        load(tmp_path / "bad.json")


def test_the_json_carries_the_typed_fields_beside_the_words(tmp_path):
    path = write_ab(tmp_path / "ab.json", slow=1.3)
    cells = judge_pair(load(path, side="A"), load(path, side="B")).as_json["cells"]
    assert {(c["verdict"], c["direction"], c["confirmed"], c["cause"]) for c in cells} == {
        ("regression", "regression", True, "baseline")}
    folder = nightly(tmp_path, 10, slow_from=9, factor=1.6, drift=0.03)
    judged = judge_history(runs_of(folder), ab=compare(load(path, side="A"), load(path, side="B"))).as_json
    confirmed = [c for c in judged["suspected"] if c["verdict"] == "regression (confirmed by A/B)"]
    assert confirmed and all(c["newest"] and c["confirmed"] and c["cause"] == "same-night A/B" for c in confirmed)
    assert all(c["cause"] == "same-night A/B" and not c["standing"] for c in judged["cells"] if c["verdict"] == "regression")


def test_a_gate_result_is_what_the_session_lists():
    assert GateResult("# fine").as_dict() == {"text": "# fine", "fail": False, "exit": ExitCode.OK, "headline": ""}
    assert GateResult("# refused", ExitCode.BAD_OPTION).fail


def test_a_same_night_ab_judges_the_cells_a_short_history_cannot(tmp_path):
    """Three nights (a new history, or nights left out for the cores' placement) are too few to judge
    a cell; the interleaved A/B of an upgrade night compared the stacks on its own, so its confirmed
    regression is the cell's verdict and fails the job, and an A/B that found nothing judges nothing."""
    folder = nightly(tmp_path, 3, slow_from=2, factor=1.3)
    slow = write_ab(tmp_path / "slow.json", slow=1.3)
    judgement = judge_history(runs_of(folder), ab=compare(load(slow, side="A"), load(slow, side="B")))
    assert judgement.regressed, judgement.text
    cells = judgement.as_json["cells"]
    assert cells and {(c["verdict"], c["cause"]) for c in cells} == {("regression", "same-night A/B")}, cells
    cells_run = len(runs_of(folder)[-1].cells)   # the nights run more ops than the A/B measured
    assert f"{len(cells)} cells: {len(cells)} regression" in judgement.text
    assert f"{cells_run - len(cells)} cells in fewer than 4 runs not judged" in judgement.text
    alike = write_ab(tmp_path / "alike.json", slow=1.0)
    judgement = judge_history(runs_of(folder), ab=compare(load(alike, side="A"), load(alike, side="B")))
    assert not judgement.regressed and judgement.as_json["cells"] == [], judgement.text
    assert "same-day A/B: confirmed 0 of the" in judgement.text and "nothing judged yet" in judgement.headline
