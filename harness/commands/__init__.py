"""CLI commands, one module each; `harness.cli` assembles them."""
