"""Synthetic KernelBench problems with verified Triton solutions, split by operator pairs.

    kbench synth --out runs/synth --n 2000 --seed 0 --verify --device cpu --evaluators 2

Each problem is an elementwise expression tree over one to three inputs (arithmetic, activations,
clamps, constants), optionally followed by a row reduction, softmax or norm; its solutions are
rendered from the same tree (several variants: block sizes, one fused kernel or two). Problems whose
operator pairs include a held-out pair go to the held-out split, so held-out problems are
compositions that training never saw; the others are shared between train and, when asked for, an
in-distribution test split. See build.py for the folder layout.
"""

from kbencheval.synth.build import SynthConfig, SynthProblem, generate, static_filter, verify, write

__all__ = ["SynthConfig", "SynthProblem", "generate", "static_filter", "verify", "write"]
