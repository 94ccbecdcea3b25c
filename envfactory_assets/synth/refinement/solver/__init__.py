"""The solver that calibration runs k times per turn, and the judge of its attempts."""
