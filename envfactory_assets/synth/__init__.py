"""QueryGen: topology-aware sampling, trajectories, calibrated refinement, SFT/RL datasets."""
