"""harness/audit."""
