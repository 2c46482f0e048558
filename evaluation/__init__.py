"""Evaluating a knowledge base on its own questions, on top of `retrieval`: question sets and their
check against the base (`questions`), metrics and intervals (`metrics`), a run and its report
(`run`, also `python -m evaluation`), question sets kept in Elasticsearch (`store`) and drafted
questions (`drafts`)."""
