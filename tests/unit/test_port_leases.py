"""rlrun.rollout.process.free_port / free_port_range: a port handed out is leased (a file shared by the machine's
processes) and not handed out again for LEASE_S, so that engines started at once, which bind their ports a minute
after picking them, never get the same one even when the kernel offers it twice."""
import json
import multiprocessing as mp
import socket

import pytest

from rlrun.rollout import process


@pytest.fixture
def leases(tmp_path, monkeypatch):
    path = tmp_path / "leases.json"
    monkeypatch.setattr(process, "PORT_LEASES", path)
    return path


def test_a_port_the_kernel_offers_twice_is_handed_out_once(leases, monkeypatch):
    offers = iter([41001, 41001, 41001, 41002])  # what bind(0) returned: the same free port three times
    monkeypatch.setattr(process, "_bind_free", lambda host: next(offers))
    assert process.free_port() == 41001
    assert process.free_port() == 41002
    assert set(json.loads(leases.read_text())) == {"41001", "41002"}


def test_leases_expire_after_lease_s(leases, monkeypatch):
    leases.write_text(json.dumps({"41001": 1000.0, "41003": 5000.0}))
    monkeypatch.setattr(process.time, "time", lambda: 1000.0 + process.LEASE_S + 1)  # 41001's lease ran out
    monkeypatch.setattr(process, "_bind_free", lambda host: 41001)
    assert process.free_port() == 41001
    assert json.loads(leases.read_text()) == {"41001": 1000.0 + process.LEASE_S + 1, "41003": 5000.0}


def test_a_torn_lease_file_is_started_again(leases, monkeypatch):
    leases.write_text('{"41001": 12')  # a writer killed mid-write
    monkeypatch.setattr(process, "_bind_free", lambda host: 41005)
    assert process.free_port() == 41005
    assert list(json.loads(leases.read_text())) == ["41005"]


def test_a_range_skips_leased_ports_and_leases_all_of_its_own(leases):
    first = process.free_port_range(5)
    leased = {int(p) for p in json.loads(leases.read_text())}
    assert set(range(first, first + 5)) <= leased
    second = process.free_port_range(5)
    assert not set(range(second, second + 5)) & set(range(first, first + 5))


def _pick(path, n, out):
    process.PORT_LEASES = path
    out.put([process.free_port() for _ in range(n)])


def test_processes_picking_at_once_get_distinct_ports(leases):
    """Four processes (as four engine actors of one node) pick 25 ports each at the same time: 100 distinct ports,
    every one of them free to bind now."""
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=_pick, args=(leases, 25, out)) for _ in range(4)]
    for p in procs:
        p.start()
    got = [port for _ in procs for port in out.get(timeout=60)]
    for p in procs:
        p.join(timeout=30)
    assert len(got) == 100 and len(set(got)) == 100
    for port in got[:10]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
