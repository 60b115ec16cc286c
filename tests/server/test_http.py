"""fastlog/server/http.py: write_pieces, the pieces /metrics is written in (the endpoint
itself is tested against a real broker in tests/server/test_metrics.py)."""

from __future__ import annotations

import random

from fastlog.server.http import write_pieces


def test_write_pieces_join_runs_of_small_chunks_and_keep_large_ones_whole():
    rng = random.Random(7)
    for _ in range(200):
        chunks = [bytes([65 + i % 26]) * rng.choice((0, 1, 5, 40, 99, 100, 250))
                  for i in range(rng.randrange(0, 30))]
        pieces = write_pieces(chunks, 100)
        assert b"".join(pieces) == b"".join(chunks)
        big = [c for c in chunks if len(c) >= 100]
        assert [p for p in pieces if p in big] == big  # (each alone, in order)
        # every piece but the last and those just before a large chunk reaches the least
        for i, piece in enumerate(pieces[:-1]):
            if len(piece) < 100:
                assert len(pieces[i + 1]) >= 100 and pieces[i + 1] in big
    assert write_pieces([], 100) == []
    assert write_pieces([b"a", b"b"], 100) == [b"ab"]
