"""Agentic RAG service on Elasticsearch hybrid retrieval for Chinese knowledge bases."""
