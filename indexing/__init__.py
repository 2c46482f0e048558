"""The bulk indexing job: load files, chunk, embed, write to Elasticsearch (`python -m indexing`)."""
