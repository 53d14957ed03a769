"""How kopf persists its own bookkeeping and names events: kopf's ``OperatorSettings``, adjusted once at
startup (the operator's own settings are :mod:`tierkeeper_operator.settings`).

Kept apart from the handlers so the choice is visible in one place and testable without a cluster.
"""

from __future__ import annotations

import kopf

from tierkeeper_operator import GROUP

REPORTING_COMPONENT = "tierkeeper-operator"


def apply_operator_settings(settings: kopf.OperatorSettings, *, namespaced: bool = False) -> None:
    """Adjust kopf's defaults in place (kopf hands the settings object to the startup handler).

    ``namespaced``: the operator watches named namespaces under Roles only. kopf's runtime discovery lists
    CRDs and namespaces cluster-wide, which those Roles do not grant (it logged refusals for a minute at
    every start); with the namespaces named and our CRDs installed before the operator, it is not needed.
    """
    settings.scanning.disabled = namespaced
    # kopf's default progress storage also writes status.kopf; our CRD's structural schema has no such
    # field, so a real API server would prune it. Annotations under our own group survive pruning.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration"
    )
    settings.persistence.finalizer = f"{GROUP}/finalizer"
    settings.posting.reporting_component = REPORTING_COMPONENT
    settings.posting.event_name_prefix = "tierkeeper-"
