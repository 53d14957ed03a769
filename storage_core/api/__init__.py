"""The Tierkeeper API (tierkeeper.io/v1alpha1): the pydantic models of the TieredTopic and TieredBroker
custom resources, of the Kafka cluster configuration they reference by name, and their cross-field rules.

Pure: used by the operator (which also generates the CRDs from these models) and by ``tierkeeper
standalone``, so both read the same YAML the same way.

Layer: building blocks (``.importlinter``; storage_core/DESIGN.md, "Layers").
"""

from __future__ import annotations

GROUP = "tierkeeper.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
