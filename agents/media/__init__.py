"""Synthetic media: deterministic pictures (`images`) and the per-rollout media arena (`arena`)."""
