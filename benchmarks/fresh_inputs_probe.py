"""FreshInputs' capture check by hand, in N processes sharing one GPU: per capture of each of 14 level-1
problems' get_inputs, the fraction of elements of each of four replays (seeds 11, 12, 11, 12) that differ
from make_inputs, without ("plain") and with ("cap_sync") a device sync right after the capture.

    python benchmarks/fresh_inputs_probe.py N ROUNDS OUT_DIR   # writes OUT_DIR/p2_<rank>.json, prints counts

On the H100 (2026-11-26, 5 processes, 2 rounds; two ran out of memory): plain 13 of 84 captures had a
first replay that differed in all its elements, cap_sync 0 of 84 (benchmarks/results/fresh_inputs_probe/)."""
import json, multiprocessing as mp, random, sys, time
import torch

def work(rank, rounds, out):
    torch.cuda.set_device(0)
    from kbencheval.dataset import load_bundled
    from kbencheval.eval.inputs import load_problem_module, make_inputs
    dev = torch.device("cuda", 0)
    probs = [p for p in load_bundled(1)][:14]
    rec = []
    for r in range(rounds):
        for p in probs:
            for variant in ("plain", "cap_sync"):
                m = load_problem_module(p.source, {})
                want = [[x.clone() for x in make_inputs(m, s, dev) if isinstance(x, torch.Tensor)] for s in (11, 12)]
                g = torch.cuda.CUDAGraph()
                stream = torch.cuda.current_stream(dev)
                with torch.cuda.graph(g), torch.device(dev):
                    static = list(m.get_inputs())
                torch.cuda.set_stream(stream)
                if variant == "cap_sync":
                    torch.cuda.synchronize()
                res = []
                for k, s in enumerate((11, 12, 11, 12)):
                    torch.manual_seed(s); random.seed(s)
                    g.replay()
                    got = [x for x in static if isinstance(x, torch.Tensor)]
                    diff = [(x != y).float().mean().item() for x, y in zip(got, want[k % 2])]
                    res.append(max(diff))
                rec.append({"rank": rank, "round": r, "problem": p.key, "variant": variant, "frac_diff": res})
                del g, static, want
                torch.cuda.empty_cache()
    with open(f"{out}/p2_{rank}.json", "w") as f:
        json.dump(rec, f)

if __name__ == "__main__":
    n, rounds, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    ctx = mp.get_context("spawn")
    ps = [ctx.Process(target=work, args=(i, rounds, out)) for i in range(n)]
    t = time.time()
    [p.start() for p in ps]; [p.join() for p in ps]
    recs = [e for i in range(n) for e in json.load(open(f"{out}/p2_{i}.json"))]
    for v in ("plain", "cap_sync"):
        vs = [e for e in recs if e["variant"] == v]
        bad = [e for e in vs if any(x > 0 for x in e["frac_diff"])]
        print(v, len(vs), "builds", len(bad), "with a differing replay")
        for e in bad[:12]:
            print("  ", e)
    print(f"{time.time()-t:.0f}s")
