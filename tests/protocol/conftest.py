import pytest
from protocol_helpers import kafka_python_classes


@pytest.fixture(scope="session")
def kp_classes():
    return kafka_python_classes()
