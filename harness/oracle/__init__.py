"""harness/oracle."""
