"""Tiering decisions (pure) and the executors that carry them out against a log dir and a remote store.

Layer: decisions and executors (``.importlinter``; storage_core/DESIGN.md, "Layers").
"""
