"""Command-line entry points (the thin outer layer).

Layer: entry points (``.importlinter``; storage_core/DESIGN.md, "Layers").
"""
