"""Tool-chain sampling over the tool graph (the `tool_chains` asset)."""
