"""kbencheval: KernelBench-format problems, a sandboxed kernel evaluator, LLM generation and reports."""

__version__ = "0.1.0"
