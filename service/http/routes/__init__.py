"""The service's own HTTP routes, one router per module; each declares its access in its
dependencies (service/deps.py)."""
