"""Jobs: the orchestration of one CLI verb or Kubernetes Job over adapters, executors and Spark tasks.

Entry points (CLI, operator, Spark drivers) call these; they in turn use adapters (Kafka Admin, stores),
the executors and the pure planners. Nothing below this layer imports from here.

Layer: jobs (``.importlinter``; storage_core/DESIGN.md, "Layers").
"""
