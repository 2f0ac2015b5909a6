"""zk:// group URLs: parsing, expansion with a resolver, and the subscriber's checks."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from drc.client import Subscriber
from drc.client.discovery import DiscoveryError, expand, is_group, members, split


def test_a_group_url_names_the_ensemble_and_the_group_path() -> None:
    assert is_group("zk://a:2181,b:2181/drc/dc1")
    assert not is_group("http://a:8640")
    assert split("zk://a:2181,b:2181/drc/dc1/") == ("a:2181,b:2181", "/drc/dc1")
    for bad in ("zk://a:2181", "zk:///drc", "zk://a:2181/", "http://a/drc"):
        with pytest.raises(ValueError, match="not a group URL"):
            split(bad)


def test_expansion_puts_the_members_in_place_leader_first_without_repeats() -> None:
    def members(spec: str) -> list[str]:
        return ["http://leader:1", "http://f1:1", "http://f2:1"]

    got = expand(["http://static:1", "zk://z:1/drc/dc1", "http://f1:1"], members)
    assert got == ("http://static:1", "http://leader:1", "http://f1:1", "http://f2:1")


def test_an_unresolvable_group_stays_in_the_list_to_fail_like_an_unreachable_url() -> None:
    def down(spec: str) -> list[str]:
        raise DiscoveryError("no answer")

    assert expand(["zk://z:1/drc/dc1"], down) == ("zk://z:1/drc/dc1",)
    assert expand(["zk://z:1/drc/dc1"], lambda spec: []) == ("zk://z:1/drc/dc1",)


def test_the_subscriber_takes_group_urls_and_refuses_malformed_ones() -> None:
    with pytest.raises(ValueError, match="not a group URL"):
        Subscriber(["zk://nohost"])
    with pytest.raises(ValueError, match="zk://HOSTS/PATH"):
        Subscriber(["ftp://x"])


def test_a_one_shot_request_asks_the_members_and_leaves_out_an_unresolvable_group() -> None:
    def resolver(spec: str) -> list[str]:
        if "down" in spec:
            raise DiscoveryError("ZooKeeper z:1 did not answer")
        return [] if "empty" in spec else ["http://leader:1", "http://f1:1"]

    got = members(
        ["zk://z:1/drc/down", "zk://z:1/drc/dc1", "http://f1:1", "zk://z:1/e/empty"], resolver
    )
    assert got == ("http://leader:1", "http://f1:1")


def test_a_one_shot_request_with_no_group_resolved_says_which_and_why() -> None:
    def down(spec: str) -> list[str]:
        raise DiscoveryError("ZooKeeper z:1 did not answer")

    with pytest.raises(
        DiscoveryError, match=r"zk://z:1/drc/dc1: ZooKeeper z:1 did not answer.*reachable"
    ):
        members(["zk://z:1/drc/dc1"], down)
    with pytest.raises(DiscoveryError, match="no replicator of that group is registered"):
        members(["zk://z:1/drc/dc1"], lambda spec: [])
    assert members([]) == ()


@pytest.mark.parametrize("take", [expand, members])
def test_each_group_entry_is_resolved_once_in_order_and_static_urls_never(
    take: Callable[..., tuple[str, ...]],
) -> None:
    asked: list[str] = []

    def resolver(spec: str) -> list[str]:
        asked.append(spec)
        return [f"http://{spec.rsplit('/', 1)[1]}:1"]

    urls = ["zk://z:1/drc/b", "http://static:1", "zk://z:1/drc/a"]
    assert take(urls, resolver) == ("http://b:1", "http://static:1", "http://a:1")
    assert asked == ["zk://z:1/drc/b", "zk://z:1/drc/a"]
