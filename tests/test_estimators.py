"""The per-launch statistic (--estimator, reports/estimators.py) on runs with one-sided noise, as
interference on a shared machine makes it: each is what it says, a low quantile sees a 5% change
the median cannot, an A/A stays quiet with each, every summary names it, and the budget is stated."""
import json

import numpy as np
import pytest

from harness.session.option_error import OptionError
from reports import summary
from reports.calibration import calibrate
from reports.compare import compare
from reports.estimators import ESTIMATORS, launch_value
from reports.gate import judge_pair
from reports.result_files import load
from reports.sequential import run_looks
from schema.judgement import IMPROVEMENT, REGRESSION
from schema.results import CollectiveRow, bench_entry, result_file
from tests.conftest import run_cli
from tests.test_options import parsed

SIZES = [1 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20]


def write_noisy_ab(path, slow=1.0, launches=6, seed=3, busy=0.5, wall_s=None, estimator=None, min_effect=None):
    """An interleaved A/B run whose rounds carry one-sided interference: each round is hit with
    probability `busy` and then takes up to 3x longer (exponential); side B is `slow` x side A."""
    rng = np.random.default_rng(seed)
    benches = []
    for launch in range(launches):
        drift = np.exp(rng.normal(0, 0.1))
        for size in SIZES:
            for side in "AB":
                base = (5e-6 + size / 2e9) * (slow if side == "B" else 1.0) * drift
                hit = rng.random(10) < busy
                data = list(base * (1 + 0.003 * rng.standard_normal(10) ** 2 + hit * rng.exponential(1.0, 10)))
                row = CollectiveRow(backend="mpi", algo="default", op="all_reduce", redop="sum", nranks=2, bytes=size,
                                    count=size // 4, launch=launch, side=side, iters_per_round=100)
                benches.append(bench_entry(f"{side}{launch}-{size}", row, data))
    options = {"ab_until_decided": True, "repeat": launches, **({"estimator": estimator} if estimator else {}),
               **({"min_effect": min_effect} if min_effect is not None else {})}
    meta = {"groups": {}, "options": options, **({"wall_s": wall_s} if wall_s is not None else {})}
    path.write_text(json.dumps(result_file(benches, meta)))
    return str(path)


def sides(path):
    return load(path, side="A"), load(path, side="B")


def test_each_estimator_is_the_statistic_it_names():
    times = [5.0, 1.0, 3.0, 2.0, 4.0, 10.0, 6.0, 7.0, 8.0, 9.0, 11.0]
    assert launch_value(times, "median") == 6.0
    assert launch_value(times, "min") == 1.0
    assert launch_value(times, "p10") == pytest.approx(2.0)    # 10th percentile of 11 values: the 2nd smallest
    with pytest.raises(ValueError, match="unknown estimator 'mean': allowed median, p10, min"):
        launch_value(times, "mean")


def test_a_low_quantile_sees_an_eight_percent_change_that_the_median_cannot(tmp_path):
    """Interference that only adds time: the medians of a launch's rounds scatter by tens of percent,
    its low quantiles hardly move, so min and p10 confirm an 8% slowdown from 6 launches in every
    cell of every run, the median in almost none."""
    found = {est: 0 for est in ESTIMATORS}
    for seed in range(5):
        path = write_noisy_ab(tmp_path / f"ab{seed}.json", slow=1.08, seed=seed)
        seq = {est: run_looks(*sides(path), 6, estimator=est).comparison for est in ESTIMATORS}
        seen = {est: float(np.median([c.detectable for c in cmp.cells])) for est, cmp in seq.items()}
        assert seen["min"] <= seen["p10"] < seen["median"] and seen["median"] > 0.2, seen   # 0.05: the minimum effect
        for est, cmp in seq.items():
            found[est] += sum(c.outcome.kind == REGRESSION for c in cmp.cells)
    assert found["min"] == found["p10"] == 5 * len(SIZES) and found["median"] <= 5, found


@pytest.mark.parametrize("est", ESTIMATORS)
def test_an_a_a_under_one_sided_noise_stays_within_alpha(tmp_path, est):
    """20 A/A runs with the same interference: at most 2 confirm any cell (alpha 0.05: 1 expected)."""
    flagged = 0
    for seed in range(20):
        cmp = run_looks(*sides(write_noisy_ab(tmp_path / f"aa{seed}.json", seed=seed)), 6, estimator=est).comparison
        flagged += any(c.outcome.kind in (REGRESSION, IMPROVEMENT) for c in cmp.cells)
    assert flagged <= 2, flagged


def test_every_summary_names_the_statistic_and_states_the_budget(tmp_path):
    path = write_noisy_ab(tmp_path / "ab.json", slow=1.05, wall_s=120.0)
    judgement = judge_pair(*sides(path), estimator="min")
    cmp = judgement.comparison
    assert cmp.estimator == "min" and judgement.as_json["estimator"] == "min"
    assert "verdicts rest on each launch's minimum per-op time over its rounds (--estimator min)" in judgement.text
    assert "minimum per\\-op time" in judgement.markdown and "budget: 6 launches a side" in judgement.markdown.lower()
    a, b = sides(path)
    timed = sum(sum(v) * 100 for run in (a, b) for c in run.cells.values() for v in c.launches.values())
    assert cmp.budget == {"launches": [6, 6], "ranks": 2, "timed_s": pytest.approx(timed), "wall_s": 120.0,
                          "cluster_rank_s": 240.0}
    assert "budget: 6 launches a side, 2 ranks" in judgement.text and "wall 120 s: 240 rank-s of cluster time" in judgement.text
    plain = summary.text(compare(*sides(write_noisy_ab(tmp_path / "nowall.json"))))
    assert "no wall recorded" in plain and "log launch medians" in plain


def test_a_run_is_judged_by_the_estimator_it_was_made_with_unless_told(tmp_path):
    path = write_noisy_ab(tmp_path / "ab.json", slow=1.05, estimator="min")
    assert judge_pair(*sides(path)).comparison.estimator == "min"
    assert judge_pair(*sides(path), estimator="median").comparison.estimator == "median"
    assert judge_pair(*sides(write_noisy_ab(tmp_path / "plain.json"))).comparison.estimator == "median"


def test_a_calibration_made_with_another_estimator_is_not_applied(tmp_path):
    a, b = sides(write_noisy_ab(tmp_path / "aa.json"))
    cal = calibrate(a, b, estimator="median")
    assert cal["estimator"] == "median"
    cmp = compare(a, b, calibration=cal, estimator="min")
    assert cmp.calibration.startswith("A/A calibration not applied: it was made with the median")
    assert compare(a, b, calibration=cal).calibration.startswith("A/A calibration (paired launches) applied")


def test_the_estimator_option_is_recorded_and_a_bad_one_is_one_line(tmp_path):
    results = ["--backend", "gloo", "--results", str(tmp_path / "results")]
    assert parsed(results).estimator == "median"
    assert parsed([*results, "--estimator", "p10"]).estimator == "p10"
    with pytest.raises(OptionError, match="--estimator 'mean': allowed median, p10, min"):
        parsed([*results, "--estimator", "mean"])
    path = write_noisy_ab(tmp_path / "ab.json", slow=1.05)
    out = run_cli("compare", path, "--ab", "--estimator", "min", "--json", tmp_path / "v.json")
    assert out.returncode == 1 and "--estimator min" in out.stdout
    assert json.loads((tmp_path / "v.json").read_text())["estimator"] == "min"
    assert run_cli("compare", path, "--ab", "--estimator", "median").returncode in (0, 6)


def test_a_run_is_judged_by_the_min_effect_it_was_made_with_unless_told(tmp_path):
    """A 4% slowdown: under the default 5% minimum effect it cannot be a regression; a run made with
    --min-effect 0.02 is judged at 2% (the session's verdict, replayed), and compare --min-effect wins."""
    made_at_2 = write_noisy_ab(tmp_path / "two.json", slow=1.04, launches=12, busy=0.0, min_effect=0.02)
    plain = write_noisy_ab(tmp_path / "plain.json", slow=1.04, launches=12, busy=0.0)
    assert judge_pair(*sides(made_at_2)).regressed
    assert not judge_pair(*sides(plain)).regressed
    assert judge_pair(*sides(plain), min_effect=0.02).regressed
    assert not judge_pair(*sides(made_at_2), min_effect=0.05).regressed
