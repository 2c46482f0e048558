"""Benchmarks and the retrieval evaluation (see docs/retrieval.md)."""
