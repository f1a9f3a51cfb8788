"""JSON Schemas of the golden files and of the dumps an external trainer writes (package data)."""
