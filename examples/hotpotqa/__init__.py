"""examples/hotpotqa: see its README.md."""
