"""The shared library: settings, Chinese text analysis, embedders, the index schema, documents.

It imports nothing from `service`, `indexing` or `bench` and builds nothing at import.
"""
