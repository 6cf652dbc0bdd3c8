"""--night-budget's choice of launches, on a clock the test advances (harness/session/night_budget.py)."""
from harness.session.night_budget import END_RESERVE_S, MIN_LAUNCHES, NightBudget


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_launches_are_added_while_one_more_ends_within_the_budget_and_then_none():
    clock = Clock()
    budget = NightBudget(100 + END_RESERVE_S, cap=40, clock=clock)
    ran = []
    for launch in range(40):
        if not budget.why_not(launch):
            ran.append(launch)
            clock.now += 10   # each launch takes 10 s
        assert budget.why_not(launch) == budget.why_not(launch)   # asked again mid-launch: the same answer
    assert ran == list(range(10))   # the 10th ends at 100 s; an 11th would end at 110
    assert budget.stopped_at == 10 and "10 launches took 1m40s (about 10.0 s each)" in budget.why
    assert "10 launches" in budget.line() and "launches 11-40 not run" in budget.line()
    assert budget.record()["launches"] == 10


def test_the_first_launches_always_run_and_a_budget_that_fits_all_says_so():
    clock = Clock()
    tight = NightBudget(1, cap=5, clock=clock)
    clock.now += 60
    assert [tight.why_not(i) == "" for i in range(5)] == [True] * MIN_LAUNCHES + [False] * (5 - MIN_LAUNCHES)
    roomy = NightBudget(3600, cap=5, clock=clock)
    assert all(roomy.why_not(i) == "" for i in range(5)) and "every launch up to the cap (5, --repeat) fit" in roomy.line()
