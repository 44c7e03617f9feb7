"""The order candidates are handed to several Evaluators (kbencheval/eval/sharing/schedule.py)."""

from kbencheval.eval.sharing.schedule import EvalSeconds


def test_never_seen_problems_keep_their_order_ahead_of_known_ones():
    history = EvalSeconds()
    assert history.longest_first(["a", "b", "c"]) == [0, 1, 2]
    history.record("a", 1.0)
    history.record("c", 5.0)
    assert history.longest_first(["a", "b", "c", "d"]) == [1, 3, 2, 0]


def test_the_expectation_follows_recent_evaluations():
    history = EvalSeconds(weight=0.5)
    history.record("a", 4.0)
    history.record("b", 3.0)
    assert history.longest_first(["a", "b"]) == [0, 1]
    history.record("a", 1.0)  # 4 -> 2.5, now below b
    assert history.seconds["a"] == 2.5
    assert history.longest_first(["a", "b"]) == [1, 0]


def test_ties_and_repeats_keep_the_order_given():
    history = EvalSeconds()
    for p in "xyz":
        history.record(p, 2.0)
    assert history.longest_first(["z", "x", "y", "x"]) == [0, 1, 2, 3]
