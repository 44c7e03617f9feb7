"""Whole-benchmark runs: `kbench run-one`, `kbench generate`, `kbench eval`, `kbench report`.

A run is a folder (see `store.py`); each stage reads the previous stage's files, so any stage can be
rerun alone and every stage resumes where it stopped.
"""
