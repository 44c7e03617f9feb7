"""benchmarks/grpo_calibration.py: its exact pass@1 is what sampling gives, and the CLI writes one curve per arm."""

import json
import subprocess
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import grpo_calibration as cal  # noqa: E402


def test_exact_pass_at_1_matches_the_sampled_rate():
    model = cal.make_model(0, hidden=16, layers=1)
    with torch.no_grad():  # a sharper random policy, so some answers have a probability worth sampling
        model.lm_head.weight.mul_(8.0)
    test = cal.prompts(torch.Generator().manual_seed(3), 4, length=2)
    exact = cal.measure(model, test)["pass1_t1"]
    reps = 4000
    out = cal.sample(model, test.repeat_interleave(reps, 0), 2, 1.0, torch.Generator().manual_seed(4))
    sampled = (out == cal.answers(test).repeat_interleave(reps, 0)).all(-1).float().mean().item()
    sigma = (exact * (1 - exact) / (4 * reps)) ** 0.5
    assert exact > 0.001 and abs(sampled - exact) < 4 * sigma + 1e-3, (exact, sampled)


def test_cli_writes_a_curve_per_arm_and_refuses_an_unknown_scheme(tmp_path):
    out = tmp_path / "cal.json"
    cmd = [sys.executable, str(REPO / "benchmarks" / "grpo_calibration.py"), "--length", "3", "--hidden", "16",
           "--layers", "1", "--sft-steps", "20", "--steps", "2", "--every", "1", "--group", "2", "--test-prompts", "8",
           "--out", str(out)]
    done = subprocess.run(cmd + ["--arms", "full:1e-3:2,sft:1e-3:2:0:sft,negative:1e-3:2:0.1"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert [a["scheme"] for a in result["arms"]] == ["full", "sft", "negative"]
    assert all([c["step"] for c in a["curve"]] == [0, 1, 2] for a in result["arms"])
    assert result["arms"][0]["curve"][0]["pass1_t1"] == result["sft"]["pass1_t1"]  # every arm starts from SFT
    bad = subprocess.run(cmd + ["--arms", "greedy:1e-3:2"], capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "not SCHEME:LR:PROMPTS" in bad.stderr


def test_two_styles_exact_pass_at_1_adds_both_answers_and_matches_sampling(monkeypatch):
    # --two-styles: an answer is right in either style; the exact pass@1 adds the two answers' probabilities
    monkeypatch.setattr(cal, "TWO_STYLES", True)
    model = cal.make_model(0, hidden=16, layers=1)
    test = torch.tensor([[cal.BOS, 1, 2, cal.SEP], [cal.BOS, 3, 4, cal.SEP], [cal.BOS, 5, 6, cal.SEP],
                         [cal.BOS, 7, 8, cal.SEP]])  # no palindromes: the two styles differ
    a, b = cal.answers(test, "a"), cal.answers(test, "b")
    assert (a[:, 0] == cal.STYLE_A).all() and (b[:, 0] == cal.STYLE_B).all() and not torch.equal(a[:, 1:], b[:, 1:])
    mixed = cal.sft_answers(test.repeat(50, 1), torch.Generator().manual_seed(0))[:, 0]
    assert 0.3 < (mixed == cal.STYLE_A).float().mean() < 0.7  # SFT shows each style about half the time
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)  # a few SFT steps: answers with probabilities worth sampling
    styles = torch.Generator().manual_seed(1)
    for _ in range(40):
        loss = -cal.answer_logprobs(model, test.repeat(8, 1), cal.sft_answers(test.repeat(8, 1), styles)).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    measured = cal.measure(model, test)
    reps = 4000
    out = cal.sample(model, test.repeat_interleave(reps, 0), 3, 1.0, torch.Generator().manual_seed(6))
    sampled = cal.is_correct(test.repeat_interleave(reps, 0), out).float().mean().item()
    exact = measured["pass1_t1"]
    sigma = (exact * (1 - exact) / (4 * reps)) ** 0.5
    assert exact > 0.05 and abs(sampled - exact) < 4 * sigma + 1e-3, (exact, sampled)
    assert 0.0 < measured["style_a"] < 1.0
