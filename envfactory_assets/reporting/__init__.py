"""Reports read from the store (the run report, the results table of docs/evaluation.md): they read every
stage's rows, so they sit above the stages and the store never imports them."""
