"""Reports read from the store (the run report, the README results table): they read every stage's rows,
so they sit above the stages and the store never imports them."""
