"""Calibrated refinement (the `refined_trajectories` asset): refinement operators, query wording, the model query
writer, calibration against the solver, filtering and the stage's figures."""
