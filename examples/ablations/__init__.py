"""examples/ablations: see its README.md."""
