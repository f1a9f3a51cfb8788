"""CLI commands, one module each; `compactsim.harness.cli` assembles them."""
