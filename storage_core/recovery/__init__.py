"""Topic recovery: recreate a deleted topic and make its tiered history readable again.

The remote tier keeps each topic incarnation under its own topic id, so a deleted topic's history
survives its deletion. Recovery finds that incarnation, recreates the topic in Kafka and re-produces the
committed history into it exactly once (transactional producer, progress committed with each
transaction), while the old incarnation stays readable through the remote reader. See
docs/recovery.md.

Layer: decisions and executors (``.importlinter``; storage_core/DESIGN.md, "Layers").
"""
