"""Rebuild a replaced broker's log dir from the remote tier (see docs/rebuild.md).

plan.py decides what to restore (pure), state.py keeps the log dir safe across crashes, restore.py
downloads into the staging area; storage_core/jobs/rebuild.py ties them together for one run.

Layer: decisions and executors (``.importlinter``; storage_core/DESIGN.md, "Layers").
"""
