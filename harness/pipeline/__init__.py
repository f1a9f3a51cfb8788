"""harness/pipeline."""
