"""examples/wikihop: see its README.md."""
