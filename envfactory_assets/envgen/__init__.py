"""EnvGen: the programmatic environment builder and verification by execution."""
