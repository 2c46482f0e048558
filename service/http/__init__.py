"""The HTTP shell: routes and protocols over the service's rooms, with the error mapping,
middleware (host and origin, body size, metrics), the OpenAPI additions and the page."""
