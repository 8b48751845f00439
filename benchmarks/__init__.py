"""Speed and memory measurements of etc-fairseq; run each from the repository root as ``python -m benchmarks.NAME`` (see benchmarks/README.md)."""
