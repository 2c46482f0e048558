"""Retrieval over one knowledge base, on top of `core`: the ranked lists, their fusion, the
retriever, comparison of modes, extractive evidence selection, and the search command line.

The service (HTTP, graph) and the benchmarks both use it; it imports nothing but `core`.
"""
