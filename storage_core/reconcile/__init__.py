"""The reconcile planner: spec + cluster configuration + observed Kafka and Job state -> actions + status.

One module tree used by both the Kubernetes operator and ``tierkeeper standalone``: they differ only in
how they observe (Kubernetes Jobs vs. in-process runs) and how they execute the actions. The planning
modules are pure; ``round`` and ``observed.observe_topics`` do I/O only through the Kafka clients and the
executor they are handed.

Layer: the reconcile planner (``.importlinter``; storage_core/DESIGN.md, "Layers").
"""
