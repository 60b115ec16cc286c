"""TEMPORARY test helper: builds v2 record batches until _codec.BatchBuilder lands.

(Delete once the codec's builder exists; the tests then use it instead.)"""

import struct

from fastlog._codec import crc32c, encode_varint, encode_varlong, validate_record_set


def make_batch(n_records=1, timestamp=1000, value_size=10, ts_step=1, key=b"k"):
    recs = bytearray()
    for i in range(n_records):
        body = bytearray(b"\x00")
        body += encode_varlong(i * ts_step) + encode_varint(i)
        body += encode_varint(len(key)) + key
        value = bytes([65 + i % 26]) * value_size
        body += encode_varint(len(value)) + value + encode_varint(0)
        recs += encode_varint(len(body)) + body
    max_ts = timestamp + (n_records - 1) * ts_step
    after_crc = struct.pack(">hiqqqhii", 0, n_records - 1, timestamp, max_ts, -1, -1, -1,
                            n_records) + bytes(recs)
    crc = crc32c(after_crc)
    head = struct.pack(">qiibI", 0, 4 + 1 + 4 + len(after_crc), -1, 2, crc)
    return head + after_crc


def record_set(*batches):
    """(writable buffer, headers) as the broker would hand them to Log.append."""
    buf = bytearray(b"".join(batches))
    return buf, validate_record_set(buf)
