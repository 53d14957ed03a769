"""Retention decisions (pure) for both tiers, and the executors that apply them.

Layer: decisions and executors (``.importlinter``; storage_core/DESIGN.md, "Layers").
"""
