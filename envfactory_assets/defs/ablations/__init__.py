"""The paper's ablations as assets partitioned by arm (data, SFT checkpoint, evaluation) and their report."""
