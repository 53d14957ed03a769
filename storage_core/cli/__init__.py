"""Command-line entry points (the thin outer layer)."""
