"""Attack suites, keyed to the threat table in docs/evaluator.md: each file names the rows it protects.
An attack must end in a verdict that is not `correct`, and an honest control after it must still pass."""
