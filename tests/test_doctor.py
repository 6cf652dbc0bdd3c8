"""hccl-bench doctor: the pair schedule, the group-testing search on given measurements, and (on
the emulated cluster, root) a slow link named, a healthy cluster left alone, a rank slowed by the
fault hook named and its peer not. The 20-run trials are scripts/doctor_trials.py (where a CPU hog,
real contention, is measured too); these are one run each."""
import itertools
import json
import math
import random
import statistics
import subprocess
import sys

import pytest

from collectives.doctor_tasks import ring_steps
from harness.doctor import pair_rounds, schedule
from tests.conftest import ROOT, run_cli


def link_rule(rate: dict, delay_us: dict, seed: int, jitter: float = 0.08, repeat: int = 5):
    """A hand-written measure(): a ring runs at its slowest member's rate (1 GB/s healthy) and its
    worst member's latency (20 us healthy), each repeat with up to `jitter` of seeded noise; it
    also checks that no host is in two tests of a round (they run at the same time)."""
    rng = random.Random(seed)

    def measure(tests):
        members = [h for t in tests for h in t.hosts]
        assert len(members) == len(set(members)), tests
        return [[(min(rate.get(h, 1.0) for h in t.hosts) * (1 + rng.uniform(-jitter, jitter)),
                  20.0 + max(delay_us.get(h, 0.0) for h in t.hosts) + rng.uniform(-2, 2)) for t in tests]
                for _ in range(repeat)]
    return measure


@pytest.mark.parametrize("seed", range(5))
def test_group_search_names_one_slow_host_among_16_in_at_most_7_rounds(seed):
    culprit = random.Random(seed).randrange(16)
    found = schedule.search(16, link_rule({culprit: 0.1}, {}, seed))
    assert sorted(found.named) == [culprit] and not found.unresolved
    assert len(found.rounds) <= math.ceil(math.log2(16)) + 3, len(found.rounds)
    assert found.named[culprit][0].by == "bandwidth" and found.named[culprit][0].ratio > 5


@pytest.mark.parametrize("seed", range(5))
def test_group_search_names_two_slow_hosts_and_nobody_else(seed):
    bad = random.Random(seed).sample(range(16), 2)
    found = schedule.search(16, link_rule({h: 0.3 for h in bad}, {}, seed))
    assert sorted(found.named) == sorted(bad) and not found.unresolved, (found.named, bad)


@pytest.mark.parametrize("n", [4, 5, 16, 64])
def test_group_search_names_nobody_on_a_healthy_fleet(n):
    found = schedule.search(n, link_rule({}, {}, n))
    assert found.named == {} and found.unresolved == [] and len(found.rounds) == 1


def test_group_search_names_a_host_by_its_latency():
    found = schedule.search(32, link_rule({}, {9: 1000.0}, 3))
    assert list(found.named) == [9] and found.named[9][0].by == "latency"
    assert len(found.rounds) <= math.ceil(math.log2(32)) + 3


def test_group_search_halves_the_slow_groups_and_confirms_twice_against_cleared_hosts():
    found = schedule.search(64, link_rule({40: 0.1}, {}, 1))
    sizes = [max(len(t.hosts) for t in r.tests if 40 in t.hosts) for r in found.rounds]
    assert sizes == [8, 4, 2, 2, 2]                  # eighths, halves, halves, then 40 with a helper, twice
    confirms = [t for r in found.rounds[-2:] for t in r.tests if 40 in t.hosts]
    assert [t.role for t in confirms] == ["confirm", "confirm"] and all(t.hosts[0] == 40 for t in confirms)
    helpers = [t.hosts[1] for t in confirms]
    assert helpers[0] != helpers[1]
    for rnd in found.rounds:                         # a helper was never in a slow ring without 40
        assert all(h not in t.hosts for h in helpers for i, t in enumerate(rnd.tests) if i in rnd.slow and 40 not in t.hosts)
    assert max(len(r.tests) for r in found.rounds) <= max(schedule.FIRST_GROUPS, 2 * 2) + 2   # controls capped


def test_one_slow_confirmation_names_nobody():
    confirmations = []

    def measure(tests):   # host 3's rings run slow until its first confirmation (a bad moment), then not
        confirmations.extend(t for t in tests if t.role == "confirm" and 3 in t.hosts)
        slow = [3 in t.hosts and len(confirmations) <= 1 for t in tests]
        return [[(0.1 if s else 1.0, 20.0) for s in slow] for _ in range(5)]
    found = schedule.search(16, measure)
    assert found.named == {} and found.unresolved == []
    assert [t.role for r in found.rounds for t in r.tests if 3 in t.hosts] == ["search", "confirm", "confirm"]


def test_worse_is_the_ratio_to_the_median_of_the_others():
    rng = random.Random(0)
    for _ in range(200):
        values = {i: rng.choice([1.0, 2.0, rng.random() + 0.1]) for i in range(rng.randint(2, 9))}
        for key, ratio in schedule.worse(values, True, 0.05).items():
            ref = statistics.median(v for k, v in values.items() if k != key)
            assert ratio == pytest.approx(1.0 if abs(values[key] - ref) <= 0.05 else ref / values[key])


@pytest.mark.parametrize("k", [2, 3, 4, 5, 8])
def test_ring_steps_visit_both_neighbours_in_a_proper_colouring(k):
    ring = [10 + 3 * i for i in range(k)]
    steps = {r: ring_steps(ring, r) for r in ring}
    for i, r in enumerate(ring):
        assert sorted(steps[r]) == sorted({ring[i - 1], ring[(i + 1) % k]})
    # the j-th exchange of a rank meets a peer at the same colour: replaying the blocking exchanges ends
    pending = {r: list(s) for r, s in steps.items()}
    while any(pending.values()):
        moved = [(a, pending[a][0]) for a in ring if pending[a] and pending[pending[a][0]][:1] == [a]]
        assert moved, f"deadlock: {pending}"
        for a, b in moved:
            if pending[a][:1] == [b]:
                pending[a].pop(0)
                pending[b].pop(0)


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
    from tests.conftest import orphan_segments, shm_segments
    from tests.test_cluster import SKIP, cluster, leftovers
    if SKIP:
        pytest.skip(SKIP)
    sys.path.insert(0, str(ROOT / "scripts"))
    import doctor_trials
    segments = shm_segments()

    def run(up, nproc, name, env=None):
        code, result, _ = doctor_trials.doctor(up, nproc, tmp_path / name / "doctor.json", env=env)
        return code, doctor_trials.named(result)

    def links(names):
        """The link suspects: what the shaped cluster controls. A rank may be named beside them on a
        busy machine (CI runs this beside other work: a CPU hog is real, and naming the rank behind
        one is the doctor's job), so ranks are judged only where the fault hook makes one slow."""
        return [n for n in names if n.startswith("link:")]

    cluster("down")
    try:
        up = json.loads(cluster("up", "--hosts", "4", "--link", "1gbit", "--slow", "node3=100mbit", "--json").stdout)
        code, names = run(up, 4, "slow")
        assert code == 1 and links(names) == ["link:node3"], names
        page = (tmp_path / "slow" / "page" / "doctor.html").read_text()
        assert "data:image/png;base64," in page and "node3" in page
        assert "| link | node3 |" in (tmp_path / "slow" / "page" / "doctor.md").read_text()
        cluster("down")
        up = json.loads(cluster("up", "--hosts", "4", "--link", "1gbit", "--json").stdout)
        code, names = run(up, 4, "healthy")
        assert links(names) == [] and code == (1 if names else 0), names
        cluster("down")
        up = json.loads(cluster("up", "--hosts", "2", "--link", "1gbit", "--json").stdout)
        # node2's rank (rank 1) does its work before each collective 4x as slowly: the fault hook,
        # never CPU contention (that is scripts/doctor_trials.py --only hog, a measurement). One busy
        # loop beside two ranks on two cores can halve one rank's share of a core, so 2x (the trials'
        # factor) is what the loop alone does to rank 0 when it shares rank 0's core, and rank 1 then
        # reads 1x its peer; at 4x it reads at least 2x, past the 1.25 a rank is named at. With two
        # ranks only one can be the slower, so a busy machine cannot add a second name here
        assert run(up, 2, "slowrank", {"HCCL_BENCH_FAULT": "slow:1:doctor:4"}) == (1, ["rank:node2"])
    finally:
        subprocess.run([sys.executable, "-m", "harness.cluster", "down"], cwd=ROOT, capture_output=True)
    assert leftovers() == [] and orphan_segments(segments) == []
