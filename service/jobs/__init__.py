"""Background jobs kept in Elasticsearch (`store`), run by the HTTP service's runner (`runner`):
uploads (`upload`) and evaluations (`evaluation`), each with typed parameters."""
