"""examples/openkp: see its README.md."""
