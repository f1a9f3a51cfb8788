"""Compaction: Gym's `context_history` config and presets, the semantic history, policies, lineage, views and schedules."""
