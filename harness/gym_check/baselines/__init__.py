"""Committed known-good Gym schema snapshots (data only)."""
