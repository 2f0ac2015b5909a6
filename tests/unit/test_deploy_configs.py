"""deploy/: every example config loads with the real loader, and the two datacenters' three
members each fit together (identities unique, everything else equal, channels point at the other
datacenter's members)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from drc.config import DrcConfig, load_config

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
EXAMPLES = sorted(DEPLOY.glob("*.toml")) + sorted(DEPLOY.glob("dc*/*.toml"))
DATACENTERS = {d.name: sorted(d.glob("*.toml")) for d in sorted(DEPLOY.glob("dc*/"))}


def _group(path: Path) -> dict[str, Any]:
    group = load_config(path).group
    assert group is not None, f"{path.name} has no [group] section"
    return group.model_dump(mode="json")


def _shared(config: DrcConfig) -> dict[str, Any]:
    """A member's config without what identifies the member."""
    data = config.model_dump(mode="json")
    del data["source"]["replica_server_id"], data["replicator"]["buffer_dir"]
    del data["group"]["member_id"], data["group"]["advertise_url"]
    return data


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_every_example_config_loads(path: Path) -> None:
    load_config(path)


def test_two_datacenters_of_three_members() -> None:
    assert {dc: [p.stem for p in paths] for dc, paths in DATACENTERS.items()} == {
        "dc1": ["dc1-a", "dc1-b", "dc1-c"],
        "dc2": ["dc2-a", "dc2-b", "dc2-c"],
    }


@pytest.mark.parametrize("dc", sorted(DATACENTERS))
def test_members_differ_only_in_their_identity(dc: str) -> None:
    paths = DATACENTERS[dc]
    configs = [load_config(p) for p in paths]
    assert all(c.datacenter.name == dc for c in configs)
    assert all(_shared(c) == _shared(configs[0]) for c in configs)
    for path, config in zip(paths, configs, strict=True):
        # drc-replicator@.service makes /var/lib/drc/<instance> (0700) its only writable path.
        assert config.replicator.buffer_dir.parent == Path("/var/lib/drc") / path.stem
    groups = [_group(p) for p in paths]
    assert [g["member_id"] for g in groups] == [p.stem for p in paths]
    assert all(g["path"] == "/drc" for g in groups)  # the group is /drc/<datacenter>
    assert all(g["zookeeper"] == groups[0]["zookeeper"] for g in groups)
    assert all(z.startswith(f"{dc}-zk-") for z in groups[0]["zookeeper"].split(","))  # own


def test_server_ids_are_unique_across_every_member() -> None:
    ids = [load_config(p).source.replica_server_id for ps in DATACENTERS.values() for p in ps]
    assert len(set(ids)) == len(ids) == 6


def test_channels_pull_from_every_member_of_the_other_datacenter() -> None:
    advertised = {
        dc: [_group(p)["advertise_url"] for p in paths] for dc, paths in DATACENTERS.items()
    }
    for dc, paths in DATACENTERS.items():
        config = load_config(paths[0])
        (other,) = set(DATACENTERS) - {dc}
        (channel,) = config.channels
        assert (channel.origin, list(channel.remote)) == (other, advertised[other])
        assert list(config.conflicts.local_api) == advertised[dc]


def test_every_member_has_the_same_conflict_rules() -> None:
    rules = {
        load_config(p).conflicts.model_dump_json(exclude={"local_api"})
        for paths in DATACENTERS.values()
        for p in paths
    }
    assert len(rules) == 1


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_secrets_are_given_as_files_never_inline(path: Path) -> None:
    config = load_config(path)
    inline = [config.source.password, config.target and config.target.password]
    inline += [c.token for c in config.channels] + list(config.api.tokens)
    assert not any(inline)
