"""python scripts/make_tiny_model.py --out /tmp/tiny-qwen3 [--vocab-size 1024] [--hidden 64] [--layers 2] [--corpus DIR]

Builds a tiny, random-weight Qwen3 model with a locally trained byte-level BPE tokenizer, so the
whole generation and RL stack can run offline on a CPU in seconds. The tokenizer is trained on the
bundled problem files plus some stdlib Python source; it has Qwen-style chat markers
(<|im_start|>role ... <|im_end|>) and a chat template. The output folder loads with
AutoModelForCausalLM / AutoTokenizer.from_pretrained(DIR). The model's text is gibberish: it exists
to exercise token ids, logprobs and weight updates, not to write kernels.
"""

from __future__ import annotations

import argparse
import sys
import sysconfig
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAD, EOS, IM_START, IM_END = "<|endoftext|>", "<|im_end|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = [PAD, IM_START, IM_END, "<think>", "</think>"]
# Qwen-style turns; the string building is explicit so Jinja whitespace control cannot eat newlines.
CHAT_TEMPLATE = (
    "{%- for m in messages -%}"
    "{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)
# A small, fixed slice of the stdlib keeps the corpus (and the tokenizer) reproducible across machines.
STDLIB_FILES = ["dataclasses.py", "functools.py", "argparse.py", "textwrap.py", "json/encoder.py", "heapq.py"]


def corpus_files(extra: list[str] = ()) -> list[Path]:
    files = sorted((REPO / "kbencheval" / "problems").rglob("*.py"))
    for folder in extra:  # e.g. a `kbench synth` output, so the tokenizer fits the code the model will write
        files += sorted(Path(folder).rglob("*.py"))
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files += [stdlib / name for name in STDLIB_FILES if (stdlib / name).exists()]
    return files


def train_tokenizer(vocab_size: int, extra_corpus: list[str] = ()):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # any byte stays encodable
        show_progress=False,
    )
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in corpus_files(extra_corpus)]
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS,
        pad_token=PAD,
        additional_special_tokens=[IM_START, "<think>", "</think>"],
        chat_template=CHAT_TEMPLATE,
        model_max_length=4096,
    )


def build(out: str | Path, vocab_size: int = 1024, hidden: int = 64, layers: int = 2, seed: int = 0,
          extra_corpus: list[str] = ()) -> Path:
    """Write tokenizer + random Qwen3ForCausalLM to `out`; returns the folder."""
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(vocab_size, extra_corpus)
    heads = max(1, hidden // 16)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=max(1, heads // 2),
        head_dim=hidden // heads,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config).to(torch.float32)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[2], formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                                 epilog="example: python scripts/make_tiny_model.py --out runs/tiny-model")
    ap.add_argument("--out", required=True, help="output folder")
    ap.add_argument("--vocab-size", type=int, default=1024, help="tokenizer vocabulary size")
    ap.add_argument("--hidden", type=int, default=64, help="hidden size (a multiple of 16)")
    ap.add_argument("--layers", type=int, default=2, help="decoder layers")
    ap.add_argument("--seed", type=int, default=0, help="weight init seed")
    ap.add_argument("--corpus", action="append", default=[], help="extra folder of .py files for the tokenizer (repeatable)")
    args = ap.parse_args(argv)
    if args.hidden % 16:
        ap.error("--hidden must be a multiple of 16 (heads of size 16)")
    t0 = time.perf_counter()
    missing = [c for c in args.corpus if not Path(c).is_dir()]
    if missing:
        ap.error(f"--corpus {missing[0]} is not a folder; pass a folder of .py files (e.g. a kbench synth output)")
    out = build(args.out, args.vocab_size, args.hidden, args.layers, args.seed, args.corpus)
    print(f"wrote tiny Qwen3 model to {out} in {time.perf_counter() - t0:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
