"""The committed fastlog/protocol/messages.py is exactly what tools/gen_protocol.py makes
from Kafka's JSON specs (so nobody hand-edited it and no regeneration was forgotten)."""

import importlib.util
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_committed_messages_match_the_generator():
    spec = importlib.util.spec_from_file_location("gen_protocol", ROOT / "tools" / "gen_protocol.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert (ROOT / "fastlog" / "protocol" / "messages.py").read_text() == gen.render()
