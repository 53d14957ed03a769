"""Tiering decisions (pure) and the executors that carry them out against a log dir and a remote store."""
