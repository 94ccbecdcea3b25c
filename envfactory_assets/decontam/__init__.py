"""Decontamination: tag environments whose tool surface overlaps held-out benchmarks."""
