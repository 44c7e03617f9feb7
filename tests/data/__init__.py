"""Problems and data: the bundled suite, loaders and configs, synth, corpora, RA-ICL retrieval, SFT data,
prompts, and KernelBench interop (import, export, compare, server presets)."""
