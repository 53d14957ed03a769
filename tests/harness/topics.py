"""Creating a topic again under the name of one just deleted (its incarnation tests)."""

from __future__ import annotations

import time

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic


def create_again(admin: AdminClient, topic: NewTopic, timeout: float = 180.0) -> None:
    """Create ``topic`` once its deleted namesake is gone: the controller finishes a delete asynchronously,
    so TOPIC_ALREADY_EXISTS is polled away until ``timeout``; any other error is raised at once."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            admin.create_topics([topic])[topic.topic].result(120)
            return
        except KafkaException as error:
            if error.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS or time.monotonic() > deadline:
                raise
            time.sleep(0.5)
