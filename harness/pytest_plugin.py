"""pytest plugin for compactsim (fixtures and markers arrive with the runner)."""
