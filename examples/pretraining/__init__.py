"""examples/pretraining: see its README.md."""
