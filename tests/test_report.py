"""The report: a self-contained page whose figures decode, escaped text, a short Markdown summary,
and stored baselines."""
import base64
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import matplotlib.image
import pytest

from harness.session import baselines
from reports.report_page import render
from reports.result_files import load
from tests.conftest import ROOT
from tests.test_compare import write_run


def test_report_is_self_contained_with_real_figures(tmp_path):
    runs = []
    for i, slow in enumerate((1.0, 1.0, 1.3)):
        path = write_run(tmp_path / f"r{i}.json", i, lambda op, size, s=slow: s if op == "all_reduce" else 1.0, launches=3)
        data = json.loads(open(path).read())
        data["hccl_bench"]["provenance"] = {"cann": {"cann": f"8.{i}.RC1"}, "env": {"HCCL_BUFFSIZE": f"<script>x{i}</script>"}}
        open(path, "w").write(json.dumps(data))
        runs.append(load(path))
    out = render(runs, tmp_path / "report")
    html = open(out["html"]).read()
    assert "<script>x" not in html and "&lt;script&gt;x2&lt;/script&gt;" in html    # escaped
    assert not re.search(r'(src|href)="(https?:)?//', html)                         # nothing fetched from outside
    pngs = re.findall(r'src="data:image/png;base64,([^"]+)"', html)
    assert len(pngs) == out["figures"] >= 6
    for png in pngs:
        assert matplotlib.image.imread(io.BytesIO(base64.b64decode(png)), format="png").shape[0] > 100
    assert "8.0.RC1" in html and "8.2.RC1" in html and "cann.cann" in html           # provenance diff
    assert "alpha (us)" in html and "half peak at" in html
    md = open(out["markdown"]).read()
    assert out["regressed"] and "**Regressions**" in md and len(md) < 60_000


def test_baselines_save_list_find_and_auto(tmp_path):
    result = write_run(tmp_path / "r.json", 1)
    root = tmp_path / "baselines"
    saved = baselines.save(result, "cann-8.0.RC3", root)
    assert saved.parent.name == "cpu-1x2-mpi" and (saved / "results.json").exists()
    assert [e["name"] for e in baselines.entries(root)] == ["cann-8.0.RC3"]
    assert baselines.find("cann-8.0.RC3", root)["cells"] == 33
    assert baselines.auto(result, root) == str(saved / "results.json")


def test_report_of_one_ab_run_puts_side_a_against_side_b(tmp_path):
    from tests.test_cli import cli
    from tests.test_compare import write_ab
    ab = write_ab(tmp_path / "ab.json", slow=1.3, drift_sd=0.3)
    proc = cli("report", ab, "--ab", "-o", str(tmp_path / "rep"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    html = (tmp_path / "rep" / "report.html").read_text()
    assert "side A" in html and "side B" in html and html.count("data:image/png") >= 2
    assert "rank_env.HCCL_BUFFSIZE" in html                                            # what B changed
    assert "**Regressions**" in (tmp_path / "rep" / "summary.md").read_text()
    proc = cli("report", ab, ab, "--ab", "-o", str(tmp_path / "rep2"))
    assert proc.returncode == 2 and "one interleaved" in proc.stderr


def test_the_verdict_comes_first_with_badges_and_legends_name_what_differs(tmp_path):
    from reports.report_page import RATIO_RANGE, names_by_difference
    from tests.test_compare import write_ab
    ab = write_ab(tmp_path / "ab.json", slow=1.3, drift_sd=0.3)
    runs = [load(ab, side="A"), load(ab, side="B")]
    assert names_by_difference(runs) == ["as is (side A, baseline)", "HCCL_BUFFSIZE=400 (side B, candidate)"]
    out = render(runs, tmp_path / "page")
    html = open(out["html"]).read()
    top = html[:html.index("<h2>What changed")]
    assert "Regression: 1" in top and 'class="badge b-regression">regression<' in top
    assert "all_reduce float32 sum 2 ranks mpi/default" in top and "busbw -2" in top
    assert "HCCL_BUFFSIZE=400 (side B, candidate)" in html and "<dt>busbw</dt>" in html
    assert RATIO_RANGE == (0.25, 4.0)


def test_a_wide_interval_is_clipped_not_drawn_to_scale(tmp_path):
    """One launch of two rounds a side: intervals spanning orders of magnitude are clipped to the
    panel's range and marked, and the figure still draws."""
    from reports.compare import compare
    from reports.report_page import RATIO_RANGE, _ratio_figure, clipped_band
    a = load(write_run(tmp_path / "a.json", 1, rounds=2, noise=1.5))
    b = load(write_run(tmp_path / "b.json", 2, rounds=2, noise=1.5))
    cmp = compare(a, b)
    assert max(c.high for c in cmp.cells) > 4      # the raw band would flatten the line
    ratio, low, high, marks = clipped_band(cmp.cells)
    assert min(low) >= RATIO_RANGE[0] and max(high) <= RATIO_RANGE[1] and min(ratio) >= RATIO_RANGE[0]
    assert {size for size, _ in marks} == {c.size for c in cmp.cells if c.high > 4 or c.low < 0.25} != set()
    png = _ratio_figure([("b / a", cmp)], [next(iter(a.cells.values())).series])
    assert matplotlib.image.imread(io.BytesIO(base64.b64decode(png)), format="png").shape[0] > 100


@pytest.mark.skipif(not shutil.which("chromium"), reason="needs Debian's chromium (.ci/run installs it)")
def test_the_page_renders_whole_in_chromium_with_the_verdict_on_top(tmp_path):
    from reports.screenshot import screenshot
    from tests.test_compare import write_ab
    ab = write_ab(tmp_path / "ab.json", slow=1.3, drift_sd=0.3)
    out = render([load(ab, side="A"), load(ab, side="B")], tmp_path / "page")
    shot = screenshot(Path(out["html"]), tmp_path / "shot.png")
    image = matplotlib.image.imread(str(shot))
    height, width = image.shape[:2]
    assert width == 1200 and 1000 < height < 16000      # the whole page, cropped below its end
    assert (image[:1000].mean(axis=2) < 0.5).mean() > 0.005   # ink (the verdict and its table) in the first 1000 px


def test_the_screenshot_helper_says_what_is_missing_in_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "reports.screenshot", str(tmp_path / "none.html"),
                           "-o", str(tmp_path / "x.png")],
                          cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PATH": "/nonexistent"})
    assert proc.returncode == 2 and proc.stderr.startswith("screenshot: no chromium") and "Traceback" not in proc.stderr


def test_the_per_op_table_equals_pooled_figures_computed_from_the_file(tmp_path):
    """Latency floor, peak busbw and launch spread per series, recomputed here from the result
    file's raw per-round times (median per launch, median over launches) without the report's code."""
    import statistics
    path = write_run(tmp_path / "r.json", 5, launches=3, drift=0.2)
    out = render([load(path)], tmp_path / "page")
    html = open(out["html"]).read()
    table = html[html.index("<h2>Per op and algorithm</h2>"):]
    factor = {"all_reduce": 2 * (2 - 1) / 2, "all_gather": (2 - 1) / 2, "broadcast": 1.0}
    per_launch: dict = {}
    for b in json.loads(open(path).read())["benchmarks"]:
        info = b["extra_info"]
        per_launch.setdefault(info["op"], {}).setdefault(info["bytes"], []).append(statistics.median(b["stats"]["data"]))
    for op, sizes in per_launch.items():
        pooled = {size: statistics.median(m) for size, m in sizes.items()}
        floor = pooled[min(pooled)] * 1e6
        peak = max(size / t * factor[op] / 1e9 for size, t in pooled.items())
        spread = max(max(m) / min(m) for m in sizes.values())
        row = re.search(rf"<tr><td class=l>{op} float32[^<]*</td><td class=l>[^<]*</td>(.*?)</tr>", table).group(1)
        cells = re.findall(r"<td>([^<]*)</td>", row)
        assert cells[0] == f"{floor:.2f}" and cells[1] == f"{peak:.3f}", (op, cells, floor, peak)
        assert cells[7] == "3" and cells[8] == f"{spread:.2f}", (op, cells, spread)


def test_sides_that_differ_only_in_interpreter_are_named_by_their_versions(tmp_path):
    """Side B under another interpreter with no variables of its own: both sides' cells have an
    empty group env, so each side's versions come from its own groups (their side), not both."""
    from reports.report_page import names_by_difference
    from tests.test_compare import write_ab
    ab = write_ab(tmp_path / "ab.json", slow=1.3)
    data = json.loads(open(ab).read())
    for b in data["benchmarks"]:
        b["extra_info"]["group_env"] = {}
    data["hccl_bench"]["groups"] = {
        f"g{side}": {"side": side, "env": {}, "versions": {"mpi_library": f"MPICH Version:      {v}",
                                                           "python": f"3.11.7 /opt/{v}/bin/python"}}
        for side, v in (("A", "4.2.3"), ("B", "5.0.2"))}
    open(ab, "w").write(json.dumps(data))
    runs = [load(ab, side="A"), load(ab, side="B")]
    assert names_by_difference(runs) == ["MPICH 4.2.3; 3.11.7 /opt/4.2.3/bin/python (side A, baseline)",
                                         "MPICH 5.0.2; 3.11.7 /opt/5.0.2/bin/python (side B, candidate)"]
    html = open(render(runs, tmp_path / "page")["html"]).read()
    assert "ranks.mpi_library" in html and "MPICH Version:      5.0.2" in html
