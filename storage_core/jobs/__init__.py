"""Jobs: the orchestration of one CLI verb or Kubernetes Job over adapters and the pure core.

Entry points (CLI, operator, Spark drivers) call these; they in turn use adapters (Kafka Admin, stores)
and the pure planners. Nothing in the pure core imports from here.
"""
