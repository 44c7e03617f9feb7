"""A CPU calibration of GRPO's update on a nearly deterministic policy, the regime of the learning runs.

The learning runs' SFT model writes the same kernel in almost every sample (0.004-0.006 nats a token), and
every GRPO learning rate tried either moved nothing or made it worse (docs/results/learning.md, runs 6-10).
This script asks which advantage scheme and which step size improve such a policy at all, in minutes on a CPU,
with smart's own advantage and loss functions and the torch backend's optimizer settings (AdamW, betas 0.9 /
0.999, grad clip 1.0, linear warm-up).

The task: reverse a sequence of digits. A tiny Qwen3 is trained (SFT) on a cosine-decaying lr that ends at
--sft-steps, which leaves sampling at T=1 failing where greedy decoding does not, like the kernel model (longer
SFT would close more of the gap: this is a regime, not a plateau). Because the task
has exactly one correct answer, pass@1 at T=1 on the test prompts is computed exactly (the probability of the
answer under teacher forcing, averaged over prompts): no sampling noise in the measure. Every arm starts from
the same SFT weights and sees the same training prompts in the same order.

    python benchmarks/grpo_calibration.py --out runs/grpo_calibration.json      # ~15 minutes on 2 cores
    python benchmarks/grpo_calibration.py --arms full:1e-4:16,positive:1e-4:16,negative:1e-4:16 --steps 100
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from smart.algo import grpo_loss  # noqa: E402
from smart.algo.advantages import group_advantages  # noqa: E402
from smart.algo.losses import entropy_from_logits, token_logprobs  # noqa: E402
from smart.backends.torch.config import TrainConfig  # noqa: E402

DIGITS = 10
SEP, BOS = DIGITS, DIGITS + 1
# --two-styles: every answer can be written two ways, each opened by its own marker: a (the digits reversed) or
# b (the digits in their order: a copy, which a small model gets right more often than a reversal). SFT shows
# each half the time, as synth.solution_style mixed does for kernels (inline / ssa).
STYLE_A, STYLE_B = DIGITS + 2, DIGITS + 3
TWO_STYLES = False


def make_model(seed: int, hidden: int, layers: int):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    vocab = DIGITS + (4 if TWO_STYLES else 2)
    cfg = Qwen3Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=4 * hidden, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=4, head_dim=hidden // 4, max_position_embeddings=64,
                      tie_word_embeddings=True)
    return Qwen3ForCausalLM(cfg)


def prompts(gen: torch.Generator, n: int, length: int) -> torch.Tensor:
    digits = torch.randint(0, DIGITS, (n, length), generator=gen)
    return torch.cat([torch.full((n, 1), BOS), digits, torch.full((n, 1), SEP)], dim=1)


def answers(prompt_ids: torch.Tensor, style: str = "a") -> torch.Tensor:
    digits = prompt_ids[:, 1:-1]
    if not TWO_STYLES:
        return digits.flip(1)
    body = digits.flip(1) if style == "a" else digits
    return torch.cat([torch.full((len(digits), 1), STYLE_A if style == "a" else STYLE_B), body], dim=1)


def every_answer(prompt_ids: torch.Tensor) -> list[torch.Tensor]:
    return [answers(prompt_ids, "a"), answers(prompt_ids, "b")] if TWO_STYLES else [answers(prompt_ids)]


def sft_answers(prompt_ids: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """SFT's targets: with two styles, each row in one of them, half and half."""
    if not TWO_STYLES:
        return answers(prompt_ids)
    pick_a = torch.rand(len(prompt_ids), generator=gen) < 0.5
    return torch.where(pick_a[:, None], answers(prompt_ids, "a"), answers(prompt_ids, "b"))


def is_correct(prompt_ids: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    return torch.stack([(out == a).all(-1) for a in every_answer(prompt_ids)]).any(0)


def answer_logprobs(model, prompt_ids: torch.Tensor, answer_ids: torch.Tensor) -> torch.Tensor:
    """log p(answer token t | prompt, answer[:t]) for every answer position: [B, L]."""
    return token_logprobs(answer_logits(model, prompt_ids, answer_ids), answer_ids)


def answer_logits(model, prompt_ids: torch.Tensor, answer_ids: torch.Tensor) -> torch.Tensor:
    """The logits that predict each answer token under teacher forcing: [B, L, V]."""
    ids = torch.cat([prompt_ids, answer_ids], dim=1)
    return model(input_ids=ids).logits[:, prompt_ids.shape[1] - 1 : -1]


@torch.no_grad()
def sample(model, prompt_ids: torch.Tensor, length: int, temperature: float, gen: torch.Generator) -> torch.Tensor:
    ids = prompt_ids
    for _ in range(length):
        logits = model(input_ids=ids).logits[:, -1].float()
        if temperature == 0:  # the answer's tokens only: digits and, with two styles, the markers
            logits[:, SEP] = logits[:, BOS] = -float("inf")
            nxt = logits.argmax(-1, keepdim=True)
        else:
            probs = torch.softmax(logits / temperature, -1)
            nxt = torch.multinomial(probs, 1, generator=gen)
        ids = torch.cat([ids, nxt], dim=1)
    return ids[:, prompt_ids.shape[1]:]


@torch.no_grad()
def measure(model, test_prompts: torch.Tensor) -> dict[str, float]:
    """Exact pass@1 at T=1 (the answers' probabilities added), greedy pass@1, the mean entropy a token along
    the answers and, with two styles, the probability of opening with style a."""
    pass1, entropies, first_logp = 0.0, [], None
    for target in every_answer(test_prompts):
        logits = answer_logits(model, test_prompts, target)
        logp = token_logprobs(logits, target)
        pass1 = pass1 + logp.sum(-1).exp()
        entropies.append(entropy_from_logits(logits).mean().item())
        first_logp = logp[:, 0] if first_logp is None else first_logp  # style a's marker
    greedy = sample(model, test_prompts, target.shape[1], 0.0, torch.Generator().manual_seed(0))
    out = {"pass1_t1": pass1.mean().item(), "greedy": is_correct(test_prompts, greedy).float().mean().item(),
           "entropy": sum(entropies) / len(entropies)}
    return out | ({"style_a": first_logp.exp().mean().item()} if TWO_STYLES else {})


def sft(model, args, gen: torch.Generator, test_prompts: torch.Tensor) -> tuple[dict[str, float], dict]:
    """SFT to its plateau: --sft-steps at a cosine-decaying lr (to 2% of --sft-lr), as the learning runs' SFT."""
    opt = torch.optim.AdamW(model.parameters(), lr=args.sft_lr)
    total = args.sft_steps
    # warm-up times cosine from step 0 (not the torch backend's warm-up-then-cosine): the recorded calibration used it
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 50) * (0.02 + 0.98 * 0.5 * (1 + math.cos(math.pi * min(s, total) / total))))
    style_gen = torch.Generator().manual_seed(args.seed + 7)
    for step in range(1, total + 1):
        p = prompts(gen, args.sft_batch, args.length)
        loss = -answer_logprobs(model, p, sft_answers(p, style_gen)).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    return measure(model, test_prompts), opt.state_dict()


def advantages_for(rewards: torch.Tensor, group: int, scheme: str) -> torch.Tensor:
    adv = group_advantages(rewards, group, normalize_std=False, positive_only=scheme == "positive")
    return adv.clamp(max=0.0) if scheme == "negative" else adv


def grpo_arm(start, sft_optimizer: dict, arm: dict, args, test_prompts: torch.Tensor) -> dict:
    """One arm from the SFT weights: GRPO with one advantage scheme (or, scheme "sft", continued SFT on the same
    prompts' answers), lr, batch, KL and optimizer start; the measures every --every steps."""
    model = copy.deepcopy(start)
    opt = torch.optim.AdamW(model.parameters(), lr=arm["lr"], betas=(0.9, 0.999), weight_decay=0.0)
    if arm["adam"] == "sft":  # Adam's moments as SFT left them, instead of a fresh start
        opt.load_state_dict(sft_optimizer)
        for group in opt.param_groups:
            group["lr"] = group["initial_lr"] = arm["lr"]
    sched = torch.optim.lr_scheduler.LambdaLR(opt, TrainConfig(lr=arm["lr"], warmup_steps=args.warmup).lr_factor)
    gen = torch.Generator().manual_seed(args.seed + 1)  # the same prompts and sampling stream for every arm
    style_gen = torch.Generator().manual_seed(args.seed + 8)  # continued SFT's styles, apart from that stream
    curve = [dict(step=0, **measure(model, test_prompts), rollout_correct=None)]
    t0 = time.perf_counter()
    for step in range(1, args.steps + 1):
        p = prompts(gen, arm["prompts"], args.length).repeat_interleave(args.group, dim=0)
        out = sample(model, p, args.length + TWO_STYLES, 1.0, gen)
        rewards = is_correct(p, out).float()
        if arm["scheme"] == "sft":
            loss = -answer_logprobs(model, p, sft_answers(p, style_gen)).mean()
        else:
            adv = advantages_for(rewards, args.group, arm["scheme"])
            logp = answer_logprobs(model, p, out)
            ref = None
            if arm["kl"] > 0:
                with torch.no_grad():
                    ref = answer_logprobs(start, p, out)
            # one update a rollout: on-policy, ratio 1
            loss, _ = grpo_loss(logp, logp.detach(), adv, torch.ones_like(logp), ref_logprobs_BT=ref, kl_coef=arm["kl"])
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % args.every == 0 or step == args.steps:
            curve.append(dict(step=step, **measure(model, test_prompts), rollout_correct=rewards.mean().item()))
    return {**arm, "curve": curve, "seconds": round(time.perf_counter() - t0, 1)}


SCHEMES = ("full", "positive", "negative", "sft")


def arms_from(spec: str) -> list[dict]:
    """'full:1e-4:16,positive:1e-4:16:0.1:sft' -> scheme, lr, prompts a step, KL coefficient (k3, to the SFT
    model; default 0) and Adam's start (fresh, the default, or sft: SFT's moments) for each arm."""
    out = []
    for item in spec.split(","):
        parts = item.split(":")
        if not 3 <= len(parts) <= 5 or parts[0] not in SCHEMES or (len(parts) == 5 and parts[4] not in ("fresh", "sft")):
            sys.exit(f"grpo_calibration.py: --arms item {item!r} is not SCHEME:LR:PROMPTS[:KL[:ADAM]] with SCHEME "
                     "one of full, positive, negative, sft and ADAM fresh or sft")
        out.append({"scheme": parts[0], "lr": float(parts[1]), "prompts": int(parts[2]),
                    "kl": float(parts[3]) if len(parts) >= 4 else 0.0, "adam": parts[4] if len(parts) == 5 else "fresh"})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--length", type=int, default=20, help="digits to reverse")
    ap.add_argument("--two-styles", action="store_true",
                    help="every answer in two styles, an easy and a hard one, half and half in SFT (see STYLE_A)")
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--sft-lr", type=float, default=3e-3)
    ap.add_argument("--sft-batch", type=int, default=64)
    ap.add_argument("--sft-steps", type=int, default=700)
    ap.add_argument("--arms", default="full:1e-4:16,sft:1e-4:16,sft:1e-4:16:0:sft,full:1e-4:64,full:3e-4:64:0:sft",
                    help="SCHEME:LR:PROMPTS_PER_STEP[:KL_COEF[:ADAM]], comma-separated; SCHEME is full, positive, "
                    "negative or sft (continued SFT on the same prompts, the control); ADAM is fresh or sft")
    ap.add_argument("--group", type=int, default=16)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--every", type=int, default=20)
    ap.add_argument("--test-prompts", type=int, default=512)
    ap.add_argument("--out", default="runs/grpo_calibration.json")
    args = ap.parse_args()
    global TWO_STYLES
    TWO_STYLES = args.two_styles
    torch.set_num_threads(max(1, torch.get_num_threads()))
    arms = arms_from(args.arms)

    test_prompts = prompts(torch.Generator().manual_seed(10_000 + args.seed), args.test_prompts, args.length)
    model = make_model(args.seed, args.hidden, args.layers)
    t0 = time.perf_counter()
    start, sft_optimizer = sft(model, args, torch.Generator().manual_seed(args.seed), test_prompts)
    print(f"SFT: {args.sft_steps} steps in {time.perf_counter() - t0:.0f} s: pass@1 (T=1) {start['pass1_t1']:.3f}, "
          f"greedy {start['greedy']:.3f}, entropy {start['entropy']:.4f} nats a token"
          + (f", style a {start['style_a']:.3f}" if TWO_STYLES else ""), flush=True)

    results = []
    print(f"\n{'arm':<28} {'pass@1 T=1 start -> end (min)':>32} {'greedy':>15} {'entropy':>17} {'s':>5}")
    for arm in arms:
        r = grpo_arm(model, sft_optimizer, arm, args, test_prompts)
        results.append(r)
        c = r["curve"]
        low = min(x["pass1_t1"] for x in c)
        name = (f"{arm['scheme']} lr {arm['lr']:g} x{arm['prompts']}" + (f" kl {arm['kl']:g}" if arm["kl"] else "")
                + (" adam:sft" if arm["adam"] == "sft" else ""))
        print(f"{name:<28} "
              f"{c[0]['pass1_t1']:>12.3f} -> {c[-1]['pass1_t1']:.3f} ({low:.3f})      "
              f"{c[0]['greedy']:.3f} -> {c[-1]['greedy']:.3f} {c[0]['entropy']:.4f} -> {c[-1]['entropy']:.4f} "
              f"{r['seconds']:>5.0f}"
              + (f"   style a {c[0]['style_a']:.3f} -> {c[-1]['style_a']:.3f}" if TWO_STYLES else ""), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"args": vars(args), "sft": start, "arms": results},
                                         indent=1))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
