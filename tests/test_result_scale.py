"""Results of big groups: past stats.FULL_MATRIX_RANKS ranks a row keeps per-rank summaries and the
rounds that matter, every statistic read from it equals the whole matrix's, old whole-matrix files
load, and the table and report name the slowest ranks (rank, host, local rank)."""
import dataclasses
import json

import numpy as np
import pytest

from collectives.ops import OPS, bandwidths
from harness.engine.groups import GroupKey
from kinds.base import Ran
from kinds.collective import KIND as COLLECTIVE
from kinds.collective import CollectiveCase
from kinds.options import Options
from reports import table
from reports.compare import compare
from reports.report_page import _heatmaps, render
from reports.result_files import load
from schema import stats
from schema.results import SCHEMA, CollectiveRow, ResultError, bench_entry, result_file

BIG = stats.FULL_MATRIX_RANKS + 44      # just past the threshold: 300 ranks
SLOW_RANK = 77                          # 1.3x slower every round
PER_HOST = 16


def case(op: str, size: int, nranks: int) -> CollectiveCase:
    count = OPS[op].count_for(size, 4, nranks)
    return CollectiveCase(backend="mpi", algo="default", op=op, dtype="float32", redop="sum" if OPS[op].reduces else "none",
                          inplace=False, size=size, nranks=nranks, count=count, nbytes=count * 4, group=GroupKey("mpi", nranks))


def rank_results(nranks: int, seed: int, rounds: int = 20) -> list[dict]:
    """Per rank K and round times: 2% noise, one slow rank, and in each round one random rank's spike
    (1.5x), so a round's slowest rank is mostly not one of the slowest by median."""
    rng = np.random.default_rng(seed)
    m = 1e6 * rng.lognormal(0.0, 0.02, (nranks, rounds))
    m[min(SLOW_RANK, nranks - 1)] *= 1.3
    m[rng.integers(0, nranks, rounds), np.arange(rounds)] *= 1.5
    return [{"iters": 10, "round_ns": [int(v) for v in row], "wrong": 0} for row in np.rint(m)]


def places(nranks: int) -> dict:
    return {r: (f"node{r // PER_HOST:03d}", r % PER_HOST) for r in range(nranks)}


def rows_both_forms(op: str, size: int, nranks: int, seed: int) -> tuple[CollectiveRow, CollectiveRow]:
    """(summarised, whole-matrix) rows of the same rank x round data."""
    results = rank_results(nranks, seed)
    row = COLLECTIVE.row(case(op, size, nranks), Options(),
                         Ran(results, {f"node{h:03d}": PER_HOST for h in range(nranks // PER_HOST)}, places(nranks)))
    whole = dataclasses.replace(row, kept_ranks=[], rank_summary={}, **stats.rank_rounds(
        [r["round_ns"] for r in results], places(nranks), full_up_to=1 << 30))
    return row, whole


def write(path, rows: list[CollectiveRow], strip: tuple[str, ...] = ()) -> str:
    """Rows as a session writes them (json indent=1); `strip`: keys an older hccl-bench did not write."""
    entries = []
    for row in rows:
        entry = bench_entry(COLLECTIVE.case_id(row, row.size or row.bytes), row,
                            stats.per_op_seconds(row.round_ns_per_rank, row.iters_per_round).tolist())
        for key in strip:
            entry["extra_info"].pop(key, None)
        entries.append(entry)
    path.write_text(json.dumps(result_file(entries, {"groups": {}}), indent=1))
    return str(path)


SWEEP = [(op, size) for op in ("all_reduce", "all_gather") for size in (4096, 1 << 20)]


def test_a_big_group_keeps_summaries_and_the_rounds_that_matter():
    row, whole = rows_both_forms("all_reduce", 1 << 20, BIG, seed=1)
    matrix = np.asarray(whole.round_ns_per_rank)
    assert whole.per_rank == "full" and matrix.shape == (BIG, 20)
    assert row.per_rank == "summary" and row.nranks == BIG
    assert len(row.round_ns_per_rank) == len(row.kept_ranks) < 30           # 8 slowest + each round's slowest
    assert SLOW_RANK in row.kept_ranks and set(matrix.argmax(axis=0)) <= set(row.kept_ranks)
    assert row.round_ns_per_rank == [whole.round_ns_per_rank[r] for r in row.kept_ranks]
    assert {k: len(v) for k, v in row.rank_summary.items()} == dict.fromkeys(stats.RANK_QUANTILES, BIG)
    assert row.rank_summary["max"] == matrix.max(axis=1).tolist() and row.rank_summary["min"] == matrix.min(axis=1).tolist()
    assert row.rank_places[str(SLOW_RANK)] == ["node004", 13] and len(row.rank_places) == len(row.kept_ranks)
    small, _ = rows_both_forms("all_reduce", 1 << 20, 8, seed=1)
    assert small.per_rank == "full" and len(small.round_ns_per_rank) == 8 and not small.rank_summary
    assert not small.rank_places                                             # 8 ranks: nobody is named
    assert len(json.dumps(row.to_json())) < len(json.dumps(whole.to_json())) / 2


def test_every_statistic_is_the_same_from_either_form(tmp_path):
    pairs = [rows_both_forms(op, size, BIG, seed) for seed, (op, size) in enumerate(SWEEP)]
    for row, whole in pairs:
        from_summary = stats.summarize_view(row.ranks())
        assert from_summary == stats.summarize_view(whole.ranks())
        stored = {k: getattr(row, k) for k in from_summary}
        assert from_summary == stored          # time_us, spread ... as the builder computed them
        assert (row.algbw_gbps, row.busbw_gbps) == bandwidths(row.op, row.bytes, from_summary["time_us"] * 1e-6, row.nranks)
        assert stats.per_op_seconds(row.round_ns_per_rank, 10).tolist() == \
            stats.per_op_seconds(whole.round_ns_per_rank, 10).tolist()   # what the benches give pytest-benchmark
        assert row.ranks().slowest(8) == whole.ranks().slowest(8) and row.ranks().slowest(1) == [SLOW_RANK]
    summary_run = load(write(tmp_path / "summary.json", [r for r, _ in pairs]))
    whole_run = load(write(tmp_path / "whole.json", [w for _, w in pairs]))
    assert {c.row.per_rank for c in summary_run.cells.values()} == {"summary"}
    assert summary_run.cells.keys() == whole_run.cells.keys()
    for key, cell in summary_run.cells.items():
        other = whole_run.cells[key]
        assert cell.launches == other.launches and cell.pooled_s == other.pooled_s
        assert [cell.pooled(m) for m in ("time_us", "busbw_gbps", "rank_spread")] == \
               [other.pooled(m) for m in ("time_us", "busbw_gbps", "rank_spread")]
        assert stats.summarize_view(cell.row.ranks()) == \
            stats.summarize_view(other.row.ranks())
    base = load(write(tmp_path / "base.json", [rows_both_forms(op, size, BIG, 50 + i)[0] for i, (op, size) in enumerate(SWEEP)]))
    a, b = compare(base, summary_run), compare(base, whole_run)
    assert [(c.key, c.samples, c.ratio, c.low, c.high, c.verdict) for c in a.cells] == \
           [(c.key, c.samples, c.ratio, c.low, c.high, c.verdict) for c in b.cells]


def test_files_with_the_whole_matrix_and_no_per_rank_fields_still_load(tmp_path):
    """The shape every earlier hccl-bench wrote (same schema string): read as the full form."""
    old_keys = ("per_rank", "kept_ranks", "rank_summary", "rank_places")
    pairs = [rows_both_forms(op, size, BIG, seed) for seed, (op, size) in enumerate(SWEEP)]
    path = write(tmp_path / "old.json", [w for _, w in pairs], strip=old_keys)
    data = json.loads(open(path).read())
    assert data["hccl_bench"]["schema"] == SCHEMA and not any(k in data["benchmarks"][0]["extra_info"] for k in old_keys)
    run = load(path)
    for cell in run.cells.values():
        view = cell.row.ranks()
        assert view.form == "full" and view.nranks == BIG and view.slowest(1) == [SLOW_RANK] and view.where(1) == "?"
    assert {round(c.row.time_us, 6) for c in run.cells.values()} == {round(r.time_us, 6) for r, _ in pairs}


@pytest.mark.parametrize("edit, says", [
    (lambda i: i["rank_summary"]["median"].pop(), "one value per rank"),
    (lambda i: i["kept_ranks"].pop(), "kept_ranks must name one rank"),
    (lambda i: i.update(per_rank="some"), "per_rank must be 'full' or 'summary'"),
    (lambda i: i["rank_places"].update({"3": "node"}), "rank_places"),
])
def test_a_summary_that_does_not_fit_together_is_refused_in_one_line(tmp_path, edit, says):
    row, _ = rows_both_forms("all_reduce", 4096, BIG, seed=3)
    path = write(tmp_path / "bad.json", [row])
    data = json.loads(open(path).read())
    edit(data["benchmarks"][0]["extra_info"])
    open(path, "w").write(json.dumps(data))
    with pytest.raises(ResultError, match=says) as err:
        load(path)
    assert "benchmark 0" in str(err.value) and "\n" not in str(err.value)


def test_case_id_is_the_sweeps_own():
    for op, size in SWEEP:
        c = case(op, size, BIG)
        row, _ = rows_both_forms(op, size, BIG, seed=0)
        assert COLLECTIVE.case_id(row, row.bytes) == c.id


def test_the_table_and_the_report_name_the_slowest_ranks(tmp_path):
    rows = [rows_both_forms(op, size, n, seed)[0] for seed, (op, size) in enumerate(SWEEP) for n in (BIG, 24)]
    text = table.render(rows)
    lines = [line for line in text.splitlines() if " 77 node004/13 " in line]
    assert len(lines) == len(SWEEP) and all(line.split()[-1].endswith("x") for line in lines)
    assert any(" 23 node001/7 " in line for line in text.splitlines())        # 24 ranks, full form: the slow rank is 23
    assert "slowest ranks (groups of more than 8 ranks)" in text and max(map(len, text.splitlines())) <= 120
    run = load(write(tmp_path / "run.json", rows))
    out = render([run], tmp_path / "report")
    html = open(out["html"]).read()
    assert "<h2>Slowest ranks</h2>" in html and "<td>77</td><td class=l>node004</td><td>13</td>" in html
    assert "<td>23</td><td class=l>node001</td><td>7</td>" in html
    worst = max(rows, key=lambda r: r.rank_spread or 0)
    assert out["heatmaps"] == [COLLECTIVE.case_id(worst, worst.bytes)] and f"Rank x round: {out['heatmaps'][0]}" in html
    chosen = COLLECTIVE.case_id(rows[1], rows[1].bytes)
    maps = _heatmaps([run], ["r"], chosen)
    assert [m["case"] for m in maps] == [chosen, chosen]                  # its cells at 300 and at 24 ranks
    assert f"{chosen} ({BIG} ranks)" in maps[0]["caption"] + maps[1]["caption"]
    with pytest.raises(ResultError, match="--heatmap 'no-such-case'"):
        render([run], tmp_path / "report3", heatmap="no-such-case")
    assert not (tmp_path / "report3").exists()


def test_report_heatmap_option_on_the_command_line(tmp_path, capsys):
    from harness.cli import main
    row, _ = rows_both_forms("all_reduce", 4096, BIG, seed=4)
    path = write(tmp_path / "run.json", [row])
    assert main(["report", path, "-o", str(tmp_path / "rep"), "--heatmap", COLLECTIVE.case_id(row, row.bytes)]) == 0
    assert f"heatmap: {COLLECTIVE.case_id(row, row.bytes)}" in capsys.readouterr().out
    assert main(["report", path, "-o", str(tmp_path / "rep2"), "--heatmap", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--heatmap 'nope'" in err and "Traceback" not in err
