"""Benchmarks and the straightforward baseline enumerator they are measured against."""
