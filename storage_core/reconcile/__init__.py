"""The reconcile planner: spec + cluster configuration + observed Kafka and Job state -> actions + status.

One pure module tree used by both the Kubernetes operator and ``tierkeeper standalone``: they differ only
in how they observe (Kubernetes Jobs vs. in-process runs) and how they execute the actions.
"""
