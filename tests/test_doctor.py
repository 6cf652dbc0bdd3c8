"""hccl-bench doctor: the pair schedule, and (on the emulated cluster, root) a slow link named, a
healthy cluster left alone, a rank behind a CPU hog named and its peer not. The 20-run trials
are scripts/doctor_trials.py; these are one run each."""
import itertools
import json
import subprocess
import sys
import threading

import pytest

from harness.doctor import pair_rounds
from tests.conftest import ROOT, run_cli


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 16])
def test_pair_rounds_cover_every_pair_once_in_disjoint_rounds(n):
    rounds = pair_rounds(n)
    pairs = [tuple(sorted(p)) for r in rounds for p in r]
    assert sorted(pairs) == list(itertools.combinations(range(n), 2))
    assert all(len({h for p in r for h in p}) == 2 * len(r) for r in rounds)   # no host twice in a round
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)
    print(f"{n} hosts: {len(rounds)} rounds")


def test_bad_doctor_options_are_one_line():
    for args, message in ((["--nproc", "1"], "give at least 2"), (["--repeat", "2"], "at least 3"),
                          (["--bytes", "12Q"], "12Q"), (["--min-effect", "0"], "> 0")):
        proc = run_cli("doctor", "--launcher", "mpiexec -n {nproc}", "--nproc", "4", *args)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and message in proc.stderr, proc.stderr


@pytest.mark.slow
def test_doctor_on_the_emulated_cluster(tmp_path):
    from tests.test_cluster import SKIP, cluster, leftovers
    if SKIP:
        pytest.skip(SKIP)
    sys.path.insert(0, str(ROOT / "scripts"))
    import doctor_trials

    def run(up, nproc, name):
        code, result, _ = doctor_trials.doctor(up, nproc, tmp_path / name / "doctor.json")
        return code, doctor_trials.named(result)

    cluster("down")
    try:
        up = json.loads(cluster("up", "--hosts", "4", "--link", "1gbit", "--slow", "node3=100mbit", "--json").stdout)
        code, names = run(up, 4, "slow")
        assert code == 1 and names == ["link:node3"], names
        page = (tmp_path / "slow" / "page" / "doctor.html").read_text()
        assert "data:image/png;base64," in page and "node3" in page
        assert "| link | node3 |" in (tmp_path / "slow" / "page" / "doctor.md").read_text()
        cluster("down")
        up = json.loads(cluster("up", "--hosts", "4", "--link", "1gbit", "--json").stdout)
        assert run(up, 4, "healthy") == (0, [])
        cluster("down")
        up = json.loads(cluster("up", "--hosts", "2", "--link", "1gbit", "--json").stdout)
        stop, hogs = threading.Event(), []
        # two busy loops and the rank yielding to them: CI runs this once, beside other work, so the
        # fault is made plain; the 20-run trials use one loop and no yielding
        watcher = threading.Thread(target=doctor_trials.pin_and_hog, args=(stop, hogs, 2, True))
        watcher.start()
        try:
            assert run(up, 2, "hog") == (1, ["rank:node2"])
        finally:
            stop.set()
            watcher.join()
            for h in hogs:
                h.kill()
    finally:
        subprocess.run([sys.executable, "-m", "harness.cluster", "down"], cwd=ROOT, capture_output=True)
    assert leftovers() == []
