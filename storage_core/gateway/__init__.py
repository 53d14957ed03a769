"""The Kafka protocol gateway below its network layer: one codec (Kafka's own message schemas, through
kio), the rewriting of broker addresses, the decisions to serve a fetch or an offset lookup from the remote
tier, and the tier reads that answer them (``history`` reads the store; ``block_cache`` caches what the
fetcher it is handed returns). No sockets here: the network layer is storage_core.gateway_server.
DESIGN.md beside this file.

Layer: decisions and executors (``.importlinter``; storage_core/DESIGN.md, "Layers").
"""
