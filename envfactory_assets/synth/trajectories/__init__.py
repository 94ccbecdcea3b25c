"""Raw trajectories (the `raw_trajectories` asset): chains executed into turns, and the turn kinds a trajectory
can hold (conversational turns with a simulated user, parallel calls, abstention)."""
