"""python scripts/learning_config.py configs/learn_synth_cpu.yaml RUN_DIR [key=value ...]

Used by scripts/run_learning.sh: splits one learning-run YAML into the files each stage reads
(RUN_DIR/config/sft.yaml for `smart sft`, RUN_DIR/config/rl.yaml for `smart rl`), validating both
with their own config classes so a bad key fails here, before any stage runs, and prints the other
stages' settings as shell assignments (LEARN_*) for the launcher to `eval`.

Top-level keys: seed, model {vocab_size, hidden, layers}, synth {kbench synth flags}, eval {split (test: the
in-distribution split, or heldout: unseen operator pairs), greedy, heldout_problems/heldout_samples (the
unseen-pair evaluation beside a test one), timing, engine_dtype (the generating engine's, as the model was
trained), multi_turn/multi_turn_samples (turns and samples of a Kevin-mode evaluation of SFT and RL on the same
problems; 0: none), sampling and evaluator settings},
sft {SFTConfig}, rl {RLConfig; rl.train.optimizer_from: sft starts GRPO with the Adam moments of SFT's last
checkpoint, as the continued-SFT control does; an ablation's "" starts it afresh},
sft_stop {every, num_problems, num_samples, min_pass_at_k} (SFT in chunks of `every` steps up to sft.num_steps,
probing held-out pass@num_samples after each, stopping at the first chunk that reaches min_pass_at_k),
controls {sft_continued, shuffled_rewards}, ablations {NAME: {rl key: value, ...}} (more GRPO runs from the same
SFT model, each changing the named rl settings, e.g. rl_lr5e-5: {train.lr: 5.0e-5}; NAME starts with rl_), lanes
(1: every stage in turn; N > 1: shuffled-reward GRPO and the ablations run beside the main GRPO in N - 1 side
lanes, each lane on a GPU of its own when there are N), rl_pool (N > 0: GRPO draws its prompts from N train
problems that SFT never sees, scripts/learning_rl_pool.py; 0: from SFT's own). Overrides are dotted: sft.num_steps=10,
eval.num_samples=4.

example: python scripts/learning_config.py configs/learn_synth_cpu.yaml runs/learn_cpu seed=1
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kbencheval.config import ConfigError  # noqa: E402

SECTIONS = {"seed": int, "model": dict, "synth": dict, "eval": dict, "sft": dict, "rl": dict, "sft_stop": dict,
            "controls": dict, "ablations": dict, "lanes": int, "rl_pool": int}
EVAL_KEYS = {"num_problems", "num_samples", "temperature", "top_p", "max_tokens", "device", "num_gpus",
             "cpu_evaluators", "evaluators_per_gpu", "trials", "batch_size", "split", "greedy", "heldout_problems",
             "heldout_samples", "timing", "engine_dtype", "multi_turn", "multi_turn_samples"}
MODEL_KEYS = {"vocab_size", "hidden", "layers"}
SFT_STOP_KEYS = {"every", "num_problems", "num_samples", "min_pass_at_k"}
CONTROL_KEYS = {"sft_continued", "shuffled_rewards"}


def _set(tree: dict, dotted: str, raw: str) -> None:
    *parents, leaf = dotted.split(".")
    for p in parents:
        tree = tree.setdefault(p, {})
    tree[leaf] = yaml.safe_load(raw) if raw else ""  # key= clears a setting (rl.rollout.filter_fn=), as smart's own do


def load(path: str, overrides: list[str]) -> dict:
    cfg = yaml.safe_load(Path(path).read_text()) or {}
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"override {item!r} is not key=value (e.g. sft.num_steps=10)")
        _set(cfg, key, value)
    unknown = set(cfg) - set(SECTIONS)
    if unknown:
        raise ConfigError(f"unknown top-level keys {sorted(unknown)} in {path}; use {', '.join(SECTIONS)}")
    for section, keys in (("eval", EVAL_KEYS), ("model", MODEL_KEYS), ("sft_stop", SFT_STOP_KEYS),
                          ("controls", CONTROL_KEYS)):
        bad = set(cfg.get(section, {})) - keys
        if bad:
            raise ConfigError(f"unknown {section} keys {sorted(bad)} in {path}; known: {', '.join(sorted(keys))}")
    lanes = cfg.get("lanes", 1)
    if not isinstance(lanes, int) or isinstance(lanes, bool) or not 1 <= lanes <= 8:
        raise ConfigError(f"lanes must be a whole number from 1 (stages in turn) to 8 (the side GRPO runs in lanes - 1 "
                          f"lanes beside the main one), got {lanes!r}")
    pool = cfg.get("rl_pool", 0)
    if not isinstance(pool, int) or isinstance(pool, bool) or pool < 0:
        raise ConfigError(f"rl_pool must be a whole number of train problems kept from SFT for GRPO (0: none), "
                          f"got {pool!r}")
    split = cfg.get("eval", {}).get("split", "heldout")
    if split not in ("test", "heldout"):
        raise ConfigError(f"eval.split must be test (in-distribution, needs synth.test_fraction > 0) or heldout "
                          f"(unseen operator pairs), got {split!r}")
    if split == "test" and not cfg.get("synth", {}).get("test_fraction"):
        raise ConfigError("eval.split=test evaluates the in-distribution test split: set synth.test_fraction > 0")
    stop = cfg.get("sft_stop", {})
    if stop and (set(stop) != SFT_STOP_KEYS or int(stop["every"]) < 1 or int(stop["num_samples"]) < 1
                 or int(stop["num_problems"]) < 1):
        raise ConfigError(f"sft_stop needs {', '.join(sorted(SFT_STOP_KEYS))} (every, num_problems, num_samples >= 1) "
                          f"in {path}; got {stop}")
    return cfg


def stage_configs(cfg: dict, run: Path) -> tuple[dict, dict]:
    """The SFT and RL configs with the run's paths filled in (the pipeline owns these keys)."""
    seed = int(cfg.get("seed", 0))
    sft = dict(cfg.get("sft", {}))
    train = dict(sft.get("train", {}))
    if train.get("lr_schedule", "constant") != "constant" and "num_steps" in sft:  # a decay ends where SFT does
        train.setdefault("lr_decay_steps", sft["num_steps"])
        sft["train"] = train
    # rl_pool: GRPO's problems are train problems SFT never saw (scripts/learning_rl_pool.py makes both sets)
    pooled = cfg.get("rl_pool", 0) > 0
    sft_jsonl = run / "synth" / ("sft_train_minus_rl_pool.jsonl" if pooled else "sft_train.jsonl")
    sft |= {"model_path": str(run / "base"), "out_dir": str(run / "sft"), "seed": seed,
            "data": {**sft.get("data", {}), "sft_jsonl": str(sft_jsonl)}}
    rl = json.loads(json.dumps(cfg.get("rl", {})))  # deep copy: main() takes the optimizer_from marker out
    rl |= {"model_path": str(run / "sft" / "hf"), "out_dir": str(run / "rl"), "seed": seed,
           "data": {**rl.get("data", {}), "source": "local", "levels": [1], "heldout_fraction": 0.0,
                    "path": str(run / "synth" / ("rl_pool" if pooled else "train"))}}
    return sft, rl


def ablation_configs(cfg: dict, rl: dict, run: Path) -> dict[str, dict]:
    """NAME -> the RL config with that ablation's dotted rl keys changed, writing to RUN/NAME."""
    out = {}
    for name, changes in (cfg.get("ablations") or {}).items():
        if not (isinstance(name, str) and name.startswith("rl_") and name.replace("_", "").replace("-", "")
                .replace(".", "").isalnum() and name != "rl_shuffled"):
            raise ConfigError(f"ablation name {name!r}: use rl_ followed by letters, digits, '-', '.' or '_' "
                              "(it names the run folder and its evaluations), e.g. rl_lr5e-5")
        if not isinstance(changes, dict) or not changes:
            raise ConfigError(f"ablations.{name} must map rl keys to values, e.g. {{train.lr: 5.0e-5}}")
        arm = json.loads(json.dumps(rl))  # deep copy
        for key, value in changes.items():
            *parents, leaf = str(key).split(".")
            tree = arm
            for part in parents:
                tree = tree.setdefault(part, {})
            tree[leaf] = value
        arm["out_dir"] = str(run / name)
        out[name] = arm
    return out


def check_prepared_synth(cfg: dict, run: Path) -> None:
    """A synthetic set already in RUN (prepared off the device) must be the one the config asks for: the
    pipeline skips its synth stage, so a stale set would otherwise train silently on the wrong problems."""
    manifest = run / "synth" / "manifest.json"
    if not manifest.is_file():
        return
    try:
        made = json.loads(manifest.read_text()).get("config", {})
    except (OSError, ValueError, AttributeError) as e:
        raise ConfigError(f"cannot read {manifest} ({e}); remove {manifest.parent} to make the set again") from None
    wanted = {"seed": int(cfg.get("seed", 0)), **cfg.get("synth", {})}  # synth.seed pins the data across seeds
    differ = {k: (made[k], v) for k, v in wanted.items() if k in made and made[k] != v}
    if differ:
        detail = ", ".join(f"{k}: set has {a!r}, config asks {b!r}" for k, (a, b) in sorted(differ.items()))
        raise ConfigError(f"the synthetic set in {manifest.parent} was made with other settings ({detail}); "
                          "remove it or prepare it with the config's synth flags")


def _flag(key: str, value) -> str:
    """A `kbench synth` flag: true -> --key, false -> nothing, lists -> comma lists."""
    name = f"--{key.replace('_', '-')}"
    if isinstance(value, bool):
        return name if value else ""
    if isinstance(value, list):
        value = ",".join(map(str, value))
    return f"{name} {shlex.quote(str(value))}"


def main(argv: list[str]) -> int:
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    if len(argv) < 2:
        print(f"usage: {__doc__.splitlines()[0]}", file=sys.stderr)
        return 2
    from smart.config import RLConfig, SFTConfig, from_dict

    try:
        cfg = load(argv[0], argv[2:])
        run = Path(argv[1])
        check_prepared_synth(cfg, run)
        sft, rl = stage_configs(cfg, run)
        arms = ablation_configs(cfg, rl, run)
        # train.optimizer_from: sft means the SFT run's last checkpoint, known only once SFT stops: run_learning.sh
        # passes it to the GRPO runs listed here (an ablation may set "" to start Adam afresh)
        from_sft = []
        for name, arm in {"rl": rl, **arms}.items():
            train = arm.get("train", {})
            if train.get("optimizer_from") in ("sft", ""):
                if train.pop("optimizer_from") == "sft":
                    from_sft.append(name)
        sft_cfg = from_dict(SFTConfig, sft, "sft")  # validate now: a typo fails before an hour of GPU time
        rl_cfg = from_dict(RLConfig, rl, "rl")
        for name, arm in arms.items():
            from_dict(RLConfig, arm, f"ablations.{name}")
    except ConfigError as e:
        print(f"learning_config: {e}", file=sys.stderr)
        return 2
    (run / "config").mkdir(parents=True, exist_ok=True)
    (run / "config" / "sft.yaml").write_text(yaml.safe_dump(sft, sort_keys=False))
    (run / "config" / "rl.yaml").write_text(yaml.safe_dump(rl, sort_keys=False))
    for name, arm in arms.items():
        (run / "config" / f"{name}.yaml").write_text(yaml.safe_dump(arm, sort_keys=False))
    (run / "config" / "learning.json").write_text(json.dumps(cfg, indent=1) + "\n")
    # what the report prints as the run's command: the config and the overrides, not only their merge
    command = ["bash", "scripts/run_learning.sh", argv[0], str(run), *argv[2:]]
    (run / "config" / "command.txt").write_text(shlex.join(command) + "\n")
    flat = {"SEED": cfg.get("seed", 0), "LANES": cfg.get("lanes", 1), "RL_POOL": cfg.get("rl_pool", 0)}
    flat |= {f"MODEL_{k.upper()}": v for k, v in cfg.get("model", {}).items()}
    flat |= {f"EVAL_{k.upper()}": v for k, v in cfg.get("eval", {}).items()}
    flat["SYNTH_ARGS"] = " ".join(_flag(k, v) for k, v in cfg.get("synth", {}).items())
    flat |= {f"SFT_STOP_{k.upper()}": v for k, v in cfg.get("sft_stop", {}).items()}
    flat |= {f"CONTROLS_{k.upper()}": v for k, v in cfg.get("controls", {}).items()}
    flat["ABLATIONS"] = " ".join(arms)
    # the ablations dealt out in turn to the side lanes (one side lane, after the main one, when lanes is 1)
    side_lanes = max(cfg.get("lanes", 1) - 1, 1)
    flat |= {f"LANE_ARMS_{lane}": " ".join(list(arms)[lane - 1::side_lanes]) for lane in range(1, side_lanes + 1)}
    flat["PROMPT_STYLE"] = rl.get("rollout", {}).get("prompt_style", "one_shot")
    flat["SFT_NUM_STEPS"] = sft_cfg.num_steps
    flat["RL_OPTIMIZER_FROM_SFT"] = " ".join(from_sft)
    # the continued-SFT control trains as many optimizer steps as GRPO took (its steps x this)
    flat["RL_STEPS_PER_ROLLOUT"] = getattr(getattr(rl_cfg.train, "grpo", None), "num_steps_per_rollout", 1)
    for key, value in flat.items():
        value = str(value).lower() if isinstance(value, bool) else value
        print(f"LEARN_{key}={shlex.quote(str(value))}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
