# fastlog/client/isolation.py: read_committed on the reading side — dropping the batches
# of aborted transactions from a Fetch answer.
#
# Kafka's consumer algorithm (Fetcher's CompletedFetch): a read_committed Fetch answer
# lists, per partition, the aborted transactions overlapping it as (producer_id,
# first_offset). Walking the batches in offset order, every aborted transaction whose
# first offset is at or below a batch's last offset makes its producer "aborted"; a
# transactional batch of an aborted producer is dropped; that producer's ABORT marker (a
# control batch whose record key has type 0) ends it. Control batches themselves stay in
# the buffer (readers skip them) so positions still step over them.
#
# Used by fastlog.client.consumer (decode_records) and the Spark source's executor reader
# (fastlog/spark/fetch.py), on whatever thread decodes the answer; pure functions.

from __future__ import annotations

import heapq

from fastlog import _codec

ABORT = 0  # control record type of an ABORT marker (COMMIT is 1)


def _is_abort_marker(buf, h) -> bool:
    for rec in _codec.iter_records(buf, h.position):
        return _codec.parse_control_record(rec)[1] == ABORT
    return False


def drop_aborted(buf, batches, aborted_transactions):
    """buf without the batches of aborted transactions.

    batches: the complete batches of buf (_codec.scan_batches(buf).batches);
    aborted_transactions: the Fetch answer's list (objects with producer_id and
    first_offset, or (producer_id, first_offset) pairs), None or empty for none. Returns buf
    itself when nothing is dropped, else new bytes of the kept complete batches.
    """
    if not aborted_transactions or not batches:
        return buf
    pending = [(a[1], a[0]) if isinstance(a, tuple) else (a.first_offset, a.producer_id)
               for a in aborted_transactions]
    heapq.heapify(pending)
    aborted: set[int] = set()
    kept = []
    dropped = False
    for h in batches:
        if h.producer_id >= 0:
            while pending and pending[0][0] <= h.last_offset:
                aborted.add(heapq.heappop(pending)[1])
            if h.is_control:
                if h.producer_id in aborted and _is_abort_marker(buf, h):
                    aborted.discard(h.producer_id)
            elif h.is_transactional and h.producer_id in aborted:
                dropped = True
                continue
        kept.append(h)
    if not dropped:
        return buf
    view = memoryview(buf)
    return b"".join(view[h.position:h.end] for h in kept)
