"""rlrun.launch.faults: a lost node that carried only engines is tolerated (no Ray started: the node
table is a stand-in; tests/integration/test_multinode.py loses a real node that carries a trainer rank)."""
from __future__ import annotations

import time
from types import SimpleNamespace

from rlrun.launch import faults
from rlrun.launch.placement import Placement


def placement(roles_by_node: dict[str, list[str]]) -> Placement:
    """A Placement whose plan slots sit on the given Ray nodes (one slot per role entry)."""
    p = object.__new__(Placement)
    slots, bundles = [], {}
    for n, (node_id, roles) in enumerate(roles_by_node.items()):
        for g, role in enumerate(roles):
            slots.append(SimpleNamespace(node=n, gpu=g, role=role, rank=g))
            bundles[(n, g)] = SimpleNamespace(node_id=node_id)
    p.plan, p._bundle_for_slot = SimpleNamespace(placement=slots), bundles
    return p


def test_roles_on_lost_nodes():
    p = placement({"head": ["trainer", "engine"], "w1": ["engine", "engine"], "w2": ["trainer"]})
    assert p.roles_on({"w1": "10.0.0.2"}) == {"engine"}
    assert p.roles_on({"w1": "", "w2": ""}) == {"engine", "trainer"}


def test_a_node_that_carried_only_engines_is_tolerated(monkeypatch):
    alive = {"head": "10.0.0.1", "w1": "10.0.0.2"}
    monkeypatch.setattr(faults, "alive_node_ids", lambda: dict(alive))
    p = placement({"head": ["trainer"], "w1": ["engine"]})
    w = faults._Watcher(dict(alive), 0.05, lambda lost: "trainer" not in p.roles_on(lost))
    w.start()
    try:
        del alive["w1"]
        deadline = time.monotonic() + 5
        while not w.tolerated and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.2)  # more polls: still tolerated, never signalled
        assert w.tolerated == {"w1": "10.0.0.2"} and w.lost == {}
    finally:
        w.done.set()
        w.join(5)
