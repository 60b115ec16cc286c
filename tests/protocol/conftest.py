import pytest

from tests.protocol.protocol_helpers import kafka_python_classes


@pytest.fixture(scope="session")
def kp_classes():
    return kafka_python_classes()
