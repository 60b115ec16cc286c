"""Screenshots of the web console for docs/console/ (the README's "Web console").

Starts a fastlog broker (with the ACL authorizer, the anonymous user a super user) and
`fastlog console` against it (fastlog.testing), fills them with a few topics, messages,
a consumer group, an ACL and a SCRAM user, and saves one PNG per page with Debian's
Chromium driven by Playwright. Run from a checkout:

    python tools/console_screenshots.py [OUT_DIR]      # default: docs/console
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

from fastlog.client import SyncAdmin, SyncProducer, TopicPartition
from fastlog.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from fastlog.testing import BrokerProcess, ConsoleProcess

CHROMIUM = "/usr/bin/chromium"


def populate(bootstrap: str) -> None:
    with SyncAdmin(bootstrap) as admin:
        admin.create_topic("orders", 3, 1, {"retention.ms": "604800000"})
        admin.create_topic("payments", 2, 1)
        admin.create_topic("audit-log", 1, 1, {"cleanup.policy": "compact"})
        with SyncProducer(bootstrap) as producer:
            for i in range(60):
                value = json.dumps({"order": 1000 + i, "item": ["apple", "pear", "fig"][i % 3],
                                    "qty": i % 5 + 1}).encode()
                producer.send("orders", value, key=b"customer-%d" % (i % 7), partition=i % 3,
                              headers=[("source", b"web")])
            for i in range(20):
                producer.send("payments", b"\x00\x01payment-%d\xff" % i, partition=i % 2)
            producer.flush()
        admin.commit_offsets("billing", {TopicPartition("orders", p): 12 for p in range(3)})
        admin.commit_offsets("fraud-check", {TopicPartition("payments", 0): 4})
        admin.create_acls([AclBinding(
            ResourcePattern(ResourceType.TOPIC, "orders", PatternType.LITERAL),
            AccessControlEntry("User:billing", "*", AclOperation.READ,
                               AclPermissionType.ALLOW))])
        admin.alter_user_scram_credentials([("billing", "SCRAM-SHA-256", "secret", 8192)])


def main(out: Path) -> int:
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp) / "data", overrides={
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:ANONYMOUS", "group.initial.rebalance.delay.ms": "0"})
        console = None
        with broker:
            populate(broker.bootstrap)
            console = ConsoleProcess(broker.bootstrap, "--sample-interval", "1").start()
            try:
                with SyncProducer(broker.bootstrap) as producer:
                    for _ in range(8):  # some traffic for the charts
                        for i in range(50):
                            producer.send("orders", b'{"n": %d}' % i, partition=i % 3)
                        producer.flush()
                        time.sleep(1)
                shots = [
                    ("overview", "/"),
                    ("topics", "/topics"),
                    ("topic", "/topics/orders"),
                    ("messages", "/topics/orders/messages?partition=0&limit=8"),
                    ("groups", "/groups"),
                    ("group", "/groups/view?id=billing"),
                    ("charts", "/charts"),
                    ("acls", "/acls"),
                    ("users", "/users"),
                ]
                with sync_playwright() as p:
                    browser = p.chromium.launch(executable_path=CHROMIUM,
                                                args=["--no-sandbox"])
                    page = browser.new_page(viewport={"width": 1100, "height": 720})
                    for name, path in shots:
                        page.goto(console.url(path))
                        if name == "charts":
                            page.wait_for_selector(".uplot", timeout=15000)
                            time.sleep(1)
                        page.screenshot(path=str(out / f"{name}.png"))
                        print(out / f"{name}.png")
                    browser.close()
            finally:
                console.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("docs/console")))
