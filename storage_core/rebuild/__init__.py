"""Rebuild a replaced broker's log dir from the remote tier (see docs/rebuild.md).

plan.py decides what to restore (pure), state.py keeps the log dir safe across crashes, restore.py
downloads into the staging area, run.py ties them together for the CLI.
"""
