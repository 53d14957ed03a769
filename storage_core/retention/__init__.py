"""Retention decisions (pure) for both tiers, and the executors that apply them."""
