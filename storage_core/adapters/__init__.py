"""Adapters: the only code that talks to fsspec, s3fs, confluent-kafka and the Schema Registry, each behind
a small interface of our own (``store.RemoteStore`` is the ``remote.store_api.ObjectStore``), with their
failures translated into ``storage_core.errors`` types.

Layer: adapters (``.importlinter``; storage_core/DESIGN.md, "Layers").
"""
