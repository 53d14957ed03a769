"""The remote tier: where objects live (layout), what is known about them (metadata), and reading them.

``layout``, ``metadata`` and ``cover`` are pure; ``reader``, ``catalog``, ``scan_plan``, ``scrub`` and
``index_cache`` read (and the catalog writes) the store through the ``store_api.ObjectStore`` protocol.

Layer: building blocks (``.importlinter``; storage_core/DESIGN.md, "Layers").
"""
