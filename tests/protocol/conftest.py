"""Protocol test fixtures: kp_classes, kafka-python's message classes by (api key, kind),
found once per session and used as an independent reference."""

import pytest

from tests.protocol.protocol_helpers import kafka_python_classes


@pytest.fixture(scope="session")
def kp_classes():
    return kafka_python_classes()
