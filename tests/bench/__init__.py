"""kbench's benchmark runs: generate, eval and report end to end, the results log, metrics, report
comparisons and progress output."""
