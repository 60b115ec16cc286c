"""The embedded metadata store: durable atomic JSON, topics, configs, producer-id blocks."""

import asyncio
import json

import pytest

from fastlog.metadata import METADATA_FILE, EmbeddedMetadataStore, MetadataError


def run(coro):
    return asyncio.run(coro)


def test_cluster_id_is_stable_across_reopen(tmp_path):
    a = EmbeddedMetadataStore(str(tmp_path), 0)
    b = EmbeddedMetadataStore(str(tmp_path), 0)
    assert a.cluster_id == b.cluster_id and len(a.cluster_id) == 22


def test_topics_and_configs_survive_reopen(tmp_path):
    s = EmbeddedMetadataStore(str(tmp_path), 0)
    run(s.create_topic("t1", 3, [[0]] * 3, {"retention.ms": "1000"}))
    run(s.create_topic("__internal", 1, [[0]], {}, internal=True))
    run(s.set_topic_configs("t1", {"segment.bytes": "1024"}))
    r = EmbeddedMetadataStore(str(tmp_path), 0)
    assert r.topic_names() == ["__internal", "t1"]
    t = r.topic("t1")
    assert sorted(t.partitions) == [0, 1, 2] and t.partitions[2].leader == 0
    assert t.configs == {"segment.bytes": "1024"}
    assert r.topic("__internal").internal
    assert len(t.topic_id_bytes) == 16
    run(r.delete_topic("t1"))
    assert EmbeddedMetadataStore(str(tmp_path), 0).topic("t1") is None


def test_create_existing_topic_raises(tmp_path):
    s = EmbeddedMetadataStore(str(tmp_path), 0)
    run(s.create_topic("t", 1, [[0]], {}))
    with pytest.raises(KeyError):
        run(s.create_topic("t", 1, [[0]], {}))


def test_producer_id_blocks_never_repeat_after_restart(tmp_path):
    s = EmbeddedMetadataStore(str(tmp_path), 0)
    first, n = run(s.allocate_producer_ids())
    r = EmbeddedMetadataStore(str(tmp_path), 0)
    second, _ = run(r.allocate_producer_ids())
    assert second >= first + n


def test_write_is_atomic_no_tmp_left(tmp_path):
    s = EmbeddedMetadataStore(str(tmp_path), 0)
    run(s.create_topic("t", 1, [[0]], {}))
    assert sorted(p.name for p in tmp_path.iterdir()) == [METADATA_FILE]
    json.loads((tmp_path / METADATA_FILE).read_text())


def test_garbage_file_is_a_clear_error(tmp_path):
    (tmp_path / METADATA_FILE).write_text("{not json")
    with pytest.raises(MetadataError, match="cannot read metadata file"):
        EmbeddedMetadataStore(str(tmp_path), 0)


def test_the_map_of_topics_is_new_after_every_change_and_never_changed(tmp_path):
    """topics(): a map a reader may keep and compare by identity (the metrics scrape's
    controller counts do): every change makes a new one and leaves the old as it was."""
    s = EmbeddedMetadataStore(str(tmp_path), 0)
    seen = [s.topics()]
    run(s.create_topic("a", 2, [[0]] * 2, {}))
    seen.append(s.topics())
    run(s.add_partitions("a", [[0]]))
    seen.append(s.topics())
    run(s.create_topic("b", 1, [[0]], {}))
    seen.append(s.topics())
    run(s.delete_topic("a"))
    seen.append(s.topics())
    assert len({id(m) for m in seen}) == len(seen)
    assert [sorted(m) for m in seen] == [[], ["a"], ["a"], ["a", "b"], ["b"]]
    assert [len(m["a"].partitions) for m in seen[1:4]] == [2, 3, 3]
    assert s.topics() is s.topics()
    assert EmbeddedMetadataStore(str(tmp_path), 0).topics().keys() == {"b"}
