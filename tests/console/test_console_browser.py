"""The web console in a real headless browser (Debian's Chromium through Playwright)
against a real broker: create a topic, produce, browse and find a message, follow a
group's lag through commits, reset its offsets (dry run, then apply), delete it; a
topic's size on disk after producing; the read-only console refuses a change; bad input
is one sentence on the page."""

import re
import time

from fastlog.client import SyncAdmin, SyncProducer, TopicPartition


def _wait_for_text(page, selector: str, pattern: str, timeout_s: float = 15.0) -> str:
    """Reload until selector's text matches pattern (bounded): the page shows live state."""
    deadline = time.monotonic() + timeout_s
    text = ""
    while time.monotonic() < deadline:
        text = page.inner_text(selector)
        if re.search(pattern, text):
            return text
        time.sleep(0.3)
        page.reload()
    raise AssertionError(f"{selector} never matched {pattern!r}: {text!r}")


def test_create_produce_browse_and_find(page, console, bootstrap, topic_name):
    with SyncAdmin(bootstrap) as admin:
        admin.create_topic(f"other-{topic_name[-6:]}", 1, 1)  # for the search to leave out
    page.goto(console.url("/topics"))
    page.fill("form.create input[name=name]", topic_name)
    page.fill("form.create input[name=partitions]", "2")
    page.click("form.create button")
    assert page.inner_text(".notice") == f"Created topic {topic_name}."
    assert page.locator("table.partitions tbody tr").count() == 2

    page.goto(console.url(f"/topics/{topic_name}/messages", partition=1))
    for i in range(3):
        page.fill("form.produce input[name=key]", f"key-{i}")
        page.fill("form.produce textarea[name=value]", f'{{"order": {i}, "item": "apple-{i}"}}')
        page.fill("form.produce textarea[name=headers]", f'{{"trace": "t{i}"}}')
        page.click("form.produce button")
        assert page.inner_text(".notice") == f"Produced to partition 1 at offset {i}."

    page.goto(console.url(f"/topics/{topic_name}/messages", partition=1))
    rows = page.locator("table.messages tbody tr")
    assert rows.count() == 3
    assert '"item": "apple-2"' in rows.nth(2).inner_text()  # pretty JSON
    assert "trace: t2" in rows.nth(2).inner_text()

    page.fill("form.browse input[name=contains]", "apple-1")
    page.click("form.browse button")
    rows = page.locator("table.messages tbody tr")
    assert rows.count() == 1 and "key-1" in rows.nth(0).inner_text()

    page.select_option("form.browse select[name=format]", "hex")
    page.fill("form.browse input[name=contains]", "")
    page.fill("form.browse input[name=key]", "key-0")
    page.click("form.browse button")
    assert "6b65 792d 30" in page.inner_text("table.messages tbody tr")  # 'key-0' in hex

    # The search on the topics page finds the topic: as one types, and on the server.
    page.goto(console.url("/topics"))
    assert page.locator("table.topics tbody tr:visible").count() >= 2
    page.fill("form.search input[name=q]", topic_name[:-7])
    assert page.locator("table.topics tbody tr:visible").count() == 1
    page.click("form.search button")
    assert page.locator("table.topics tbody tr").count() == 1
    assert page.inner_text("table.topics tbody tr").startswith(topic_name)


def test_topic_size_shows_after_producing(page, console, bootstrap, topic_name):
    with SyncAdmin(bootstrap) as admin:
        admin.create_topic(topic_name, 1, 1)
    page.goto(console.url("/topics", q=topic_name))
    size = page.locator("table.topics tbody tr td").nth(3)
    assert size.inner_text() == "0 B"
    with SyncProducer(bootstrap) as producer:
        producer.send(topic_name, b"z" * 3000).result(30)
    page.reload()
    assert re.fullmatch(r"[0-9.]+ KiB", size.inner_text()), size.inner_text()
    assert float(size.inner_text().split()[0]) >= 2.9


def test_live_view_adds_new_messages(page, console, bootstrap, topic_name):
    with SyncAdmin(bootstrap) as admin:
        admin.create_topic(topic_name, 1, 1)
    with SyncProducer(bootstrap) as producer:
        for i in range(3):
            producer.send(topic_name, b"old %d" % i, partition=0).result(30)
        page.goto(console.url(f"/topics/{topic_name}/messages", partition=0, limit=1))
        assert page.locator("table.messages tbody tr").count() == 1
        page.check("#live")
        producer.send(topic_name, b"arrived while watching", partition=0).result(30)
        page.wait_for_selector("table.messages tbody tr:nth-child(2)", timeout=15000)
    rows = page.locator("table.messages tbody tr")
    assert "arrived while watching" in rows.nth(1).inner_text()
    time.sleep(2.5)  # another poll or more: nothing else arrives, nothing repeats
    assert rows.count() == 2


def test_group_lag_reset_and_delete(page, console, bootstrap, topic_name):
    group = f"g-{topic_name}"
    tp = TopicPartition(topic_name, 0)
    with SyncAdmin(bootstrap) as admin:
        admin.create_topic(topic_name, 1, 1)
        with SyncProducer(bootstrap) as producer:
            for f in [producer.send(topic_name, b"m%d" % i, partition=0) for i in range(10)]:
                f.result(30)
        admin.commit_offsets(group, {tp: 3})
        page.goto(console.url("/groups/view", id=group))
        assert page.inner_text("#total-lag") == "7"
        assert page.inner_text("#state") == "Empty"
        admin.commit_offsets(group, {tp: 8})
        _wait_for_text(page, "#total-lag", r"^2$")

        # Reset to the earliest offset: the dry run commits nothing.
        page.select_option("form.reset select[name=to]", "earliest")
        page.click("form.reset button")
        assert "Dry run" in page.inner_text(".notice")
        assert page.locator("table.plan tbody tr td").nth(3).inner_text() == "0"
        assert admin.fetch_offsets(group)[tp][0] == 8
        page.click("form.apply button")
        assert page.inner_text(".notice") == "Reset the offsets of 1 partitions."
        assert page.inner_text("#total-lag") == "10"
        assert admin.fetch_offsets(group)[tp][0] == 0

        # Reset to an offset, then delete the (empty) group; the browser's confirm is accepted.
        page.select_option("form.reset select[name=to]", "offset")
        page.fill("form.reset input[name=value]", "4")
        page.click("form.reset button")
        page.click("form.apply button")
        assert page.inner_text("#total-lag") == "6"
        page.click("form.danger button")
        assert page.inner_text(".notice") == f"Deleted consumer group {group}."
        assert group not in [g for g, _ in admin.list_groups()]


def test_read_only_console_refuses_a_change(page, read_only_console, console, topic_name):
    page.goto(read_only_console.url("/topics"))
    assert "read-only" in page.inner_text("header")
    assert page.locator("form.create").count() == 0
    # A forged form post (with a real token of another console) is refused by the server.
    status = page.evaluate(
        """async ([token, name]) => {
            const body = new URLSearchParams({csrf: token, name: name, partitions: "1",
                                              replication_factor: "1"});
            const r = await fetch("/topics", {method: "POST", body: body});
            return [r.status, await r.text()];
        }""", [console.csrf(), topic_name])
    assert status[0] == 403 and "read-only" in status[1]
    page.goto(read_only_console.url("/topics", q=topic_name))
    assert page.locator("table.topics").count() == 0


def test_bad_input_is_one_sentence_on_the_page(page, console, bootstrap, topic_name):
    with SyncAdmin(bootstrap) as admin:
        admin.create_topic(topic_name, 1, 1)
    page.goto(console.url(f"/topics/{topic_name}/messages", partition=0))
    page.select_option("form.browse select[name=from]", "offset")
    page.fill("form.browse input[name=offset]", "12345")
    page.click("form.browse button")
    error = page.inner_text(".error")
    assert error == (f"Offset 12345 is beyond the end of partition 0 of {topic_name}, "
                     "which is empty (end offset 0).")
    assert "Traceback" not in page.content()

    page.goto(console.url(f"/topics/{topic_name}/messages", partition=0))
    page.fill("form.produce textarea[name=value]", "v")
    page.fill("form.produce textarea[name=headers]", "[1, 2")
    page.click("form.produce button")
    assert page.inner_text(".error").startswith("The headers are not valid JSON")

    page.goto(console.url("/topics"))
    page.fill("form.create input[name=name]", "no/slashes")
    page.click("form.create button")
    assert page.inner_text(".error").endswith("is not a legal topic name: it must be 1-249 "
                                              "characters of a-z, A-Z, 0-9, '.', '_' and '-'.")
