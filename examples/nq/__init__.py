"""examples/nq: see its README.md."""
