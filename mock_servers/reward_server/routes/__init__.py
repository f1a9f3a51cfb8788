"""Routers of the mock reward server (one module per resource)."""

__all__: list[str] = []
