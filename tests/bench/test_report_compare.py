"""Report intervals (Wilson, bootstrap over problems) and `kbench report A B` with paired differences,
its HTML, and the CSV and parquet tables beside it."""

import json
import sys

import pyarrow.parquet as pq
import pytest

from kbencheval.bench import report
from kbencheval.bench.metrics import problem_bootstrap, summarize, wilson


def rec(problem, sample, correct, speedup=None, timed=True):
    return {"problem_key": problem, "level": 1, "problem_id": int(problem[1:]), "sample": sample,
            "status": "correct" if correct else "incorrect", "compiled": True, "correct": correct,
            "speedup": speedup if correct else None, "timing_meaningful": timed, "device": "cuda:0", "error": ""}


def write_run(runs, name, records):
    run = runs / name
    run.mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps({"run_name": name, "model": f"model-{name}",
                                                   "prompt_style": "one_shot", "backend": "triton"}))
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_wilson_hand_values():
    # p=0.5, n=10: centre 0.5, half-width 1.96*sqrt(0.025 + 0.0096)/1.384 = 0.2634
    assert wilson(5, 10) == pytest.approx([0.2366, 0.7634], abs=1e-4)
    lo, hi = wilson(0, 10)
    assert lo == 0.0 and hi == pytest.approx(3.8416 / 13.8416, abs=1e-4)  # z^2/(n+z^2) at zero successes
    assert wilson(0, 0) is None


def test_bootstrap_over_problems():
    same = [rec(f"P{i}", 0, True, 2.0) for i in range(5)]
    boot = problem_bootstrap(same)
    assert boot["fast_p"]["1"] == [1.0, 1.0] and boot["geomean_speedup"] == pytest.approx([2.0, 2.0])
    mixed = [rec(f"P{i}", s, i % 2 == 0, 1.5) for i in range(20) for s in range(2)]
    lo, hi = problem_bootstrap(mixed)["fast_p"]["1"]
    assert lo < 0.5 < hi
    untimed = problem_bootstrap([rec("P1", 0, True, None, timed=False), rec("P2", 0, False)])
    assert untimed["fast_p"]["1"] is None and untimed["geomean_speedup"] is None
    assert untimed["fast_p"]["0"] is not None  # fast_0 is the correct rate: defined without timings
    assert summarize(mixed)["all"]["intervals"]["correct_rate"] == wilson(20, 40)


def test_report_a_b_pairs_problems(tmp_path, capsys):
    # A solves the even problems, B all but P0; B is 2x faster where both are correct
    a = [rec(f"P{i}", 0, i % 2 == 0, 1.0) for i in range(10)]
    b = [rec(f"P{i}", 0, i != 0, 2.0) for i in range(10)] + [rec("P99", 0, True, 2.0)]
    write_run(tmp_path, "a", a)
    write_run(tmp_path, "b", b)
    assert report.main(["a", "b", f"runs_dir={tmp_path}", "--json"]) == 0
    cmp = json.loads(capsys.readouterr().out)
    assert cmp["n_common_problems"] == 10 and cmp["only_b"] == ["P99"]
    correct = cmp["paired"]["correct"]
    assert correct["diff"] == pytest.approx(0.4) and correct["lo"] <= 0.4 <= correct["hi"] and correct["n"] == 10
    assert cmp["paired"]["speedup_ratio"]["ratio"] == pytest.approx(2.0)  # P2, P4, P6, P8 timed in both
    assert cmp["paired"]["speedup_ratio"]["n"] == 4
    p0 = cmp["problems"][0]
    assert (p0["problem_key"], p0["correct_diff"]) == ("P0", -1.0)
    assert cmp["a"]["all"]["intervals"]["correct_rate"] == wilson(5, 10)

    html = (tmp_path / "a_vs_b.html").read_text()
    assert "B - A (paired)" in html and "+40.0 [" in html and "x2.00" in html
    table = pq.read_table(tmp_path / "a_vs_b_problems.parquet")
    assert table.num_rows == 10 and "correct_diff" in table.column_names
    assert (tmp_path / "a_vs_b_problems.csv").read_text().splitlines()[0].startswith("problem_key,level")

    assert report.main(["a", "b", f"runs_dir={tmp_path}"]) == 0
    out = capsys.readouterr().out
    assert "B - A (paired)" in out and "P99" in out


def test_single_report_shows_intervals_and_writes_tables(tmp_path, capsys):
    write_run(tmp_path, "a", [rec(f"P{i}", s, i % 2 == 0, 1.5) for i in range(4) for s in range(2)])
    assert report.main(["a", f"runs_dir={tmp_path}"]) == 0
    assert "50.0% [" in capsys.readouterr().out
    assert pq.read_table(tmp_path / "a" / "report_samples.parquet").num_rows == 8
    assert pq.read_table(tmp_path / "a" / "report_problems.parquet").num_rows == 4


def test_three_runs_is_an_error(tmp_path):
    with pytest.raises(report.ConfigError, match="too many runs"):
        report.parse_args(["a", "b", "c"])


def test_without_pyarrow_the_tables_are_csv_and_the_note_says_how_to_get_parquet(tmp_path, monkeypatch):
    # the core install has no pyarrow: kbench report must still write its tables, not fail
    from kbencheval.bench.tables import tables_note, write_tables

    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    written = write_tables(tmp_path / "r", {"problems": [{"key": "a", "correct": 1}]})
    assert [p.name for p in written] == ["r_problems.csv"]
    assert (tmp_path / "r_problems.csv").read_text().splitlines() == ["key,correct", "a,1"]
    assert 'pip install "tritonforge[data]"' in tables_note(written)
