"""SFT and RL rows (the `sft_dataset` and `rl_dataset` assets) and the data gaps added to them."""
