"""A trainer-side replay of golden files written only from docs/golden-spec.md (imports nothing from compactsim)."""
