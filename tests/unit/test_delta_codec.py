"""rlrun.rollout.delta, the files of rollout.weight_sync=delta: a stream published by the trainer's Publisher and
pulled into host-local checkpoints ends bit-identical to what was published, whatever the host's starting point (a
fresh host, one behind, one holding a previous run's stream); a corrupt delta is refused by its checksum."""
from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from rlrun.rollout import delta as D


def _arrays(state: dict[str, np.ndarray]) -> dict:
    return {n: (a.reshape(-1).view(np.uint8), str(a.dtype), a.shape) for n, a in state.items()}


def _publish(pub: D.Publisher, state: dict[str, np.ndarray]) -> dict:
    return pub.publish(_arrays(state), lambda out: save_file(state, str(out / D.FULL_FILE)))


def _held(local) -> dict[str, np.ndarray]:
    return load_file(str(local / D.FULL_FILE))


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(a[k].dtype == b[k].dtype and a[k].tobytes() == b[k].tobytes() for k in a)


@pytest.fixture
def states():
    rng = np.random.default_rng(0)
    s1 = {"a": rng.standard_normal((64, 32)).astype(np.float32), "b": np.zeros(256, np.float32),
          "c": np.arange(16, dtype=np.int64)}
    s2 = {k: v.copy() for k, v in s1.items()}
    s2["b"][:8] = 1.0     # 0x00000000 -> 0x3f800000: bytes 2 and 3 of each element change
    s3 = {k: v.copy() for k, v in s2.items()}
    s3["a"][0, :4] *= -1  # the sign bit: one byte of each element changes
    return s1, s2, s3


@pytest.mark.parametrize("encoding", D.ENCODINGS)
def test_a_stream_pulled_version_by_version_or_at_once_holds_the_published_bytes(tmp_path, states, encoding):
    pub = D.Publisher(tmp_path / "pub", encoding, "xxh3-128")
    first = _publish(pub, states[0])
    assert first["full"] == 1 and first["total_bytes"] == 64 * 32 * 4 + 256 * 4 + 16 * 8
    assert D.pull(tmp_path / "host", tmp_path / "pub", 1) == 1
    assert _same(_held(tmp_path / "host"), states[0])
    second = _publish(pub, states[1])
    # hand-counted: 8 elements x 2 changed bytes; xor and overwrite count the same changed bytes
    assert second["full"] == 0 and second["changed_bytes"] == 16
    index = json.loads((D.version_dir(tmp_path / "pub", 2) / D.INDEX).read_text())
    assert index["weight_map"] == {"b": D.DELTA_FILE}  # only the changed tensor travels
    assert index["metadata"]["base_version"] == "000001" and index["metadata"]["delta_encoding"] == encoding
    # the payload before zstd: overwrite 4 (count) + 16 x 4 (positions) + 16 (values) = 84 bytes; xor 1024 bytes
    # of which 16 are nonzero. The file (a safetensors header under 512 bytes plus the compressed payload) is far
    # below the 9,344 bytes of a full version
    assert second["bytes"] < 84 + 512 < first["bytes"]
    third = _publish(pub, states[2])
    assert third["changed_bytes"] == 4  # 4 sign bits, one byte each
    assert D.pull(tmp_path / "host", tmp_path / "pub", 3) == 2  # one behind: both deltas, in order
    assert _same(_held(tmp_path / "host"), states[2])
    assert D.pull(tmp_path / "host", tmp_path / "pub", 3) == 0  # already there (the other engines of the host)
    assert D.pull(tmp_path / "fresh", tmp_path / "pub", 3) == 3  # a new host: the full version, then the deltas
    assert _same(_held(tmp_path / "fresh"), states[2])


def test_a_previous_runs_local_checkpoint_is_replaced_not_patched(tmp_path, states):
    old = D.Publisher(tmp_path / "pub")
    for s in states:
        _publish(old, s)
    D.pull(tmp_path / "host", tmp_path / "pub", 3)
    new = D.Publisher(tmp_path / "pub")  # a new run: a new stream from version 1, its dir started clean
    _publish(new, states[1])
    assert not D.version_dir(tmp_path / "pub", 2).exists()
    D.pull(tmp_path / "host", tmp_path / "pub", 1)
    assert _same(_held(tmp_path / "host"), states[1])
    _publish(new, states[0])  # at version 2, as the old stream's host was once: still this stream's delta
    D.pull(tmp_path / "host", tmp_path / "pub", 2)
    assert _same(_held(tmp_path / "host"), states[0])


def test_a_corrupt_delta_fails_its_checksum(tmp_path, states):
    pub = D.Publisher(tmp_path / "pub", "overwrite", "adler32")
    _publish(pub, states[0])
    D.pull(tmp_path / "host", tmp_path / "pub", 1)
    _publish(pub, states[1])
    vdir = D.version_dir(tmp_path / "pub", 2)
    from safetensors import safe_open

    with safe_open(str(vdir / D.DELTA_FILE), "np") as f:
        meta, payload = f.metadata(), {"b": f.get_tensor("b")}
    meta["b"] = "00000000"  # the checksum the apply must find: not the new bytes' one
    save_file(payload, str(vdir / D.DELTA_FILE), metadata=meta)
    with pytest.raises(RuntimeError, match=r"checksum mismatch for 1 tensor\(s\).*\['b'\]"):
        D.pull(tmp_path / "host", tmp_path / "pub", 2)


def test_unknown_encoding_or_checksum_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(ValueError, match="use one of xor, overwrite"):
        D.Publisher(tmp_path / "p", "rle")
    with pytest.raises(ValueError, match="use one of xxh3-128, blake3, adler32"):
        D.Publisher(tmp_path / "p", "xor", "md5")
    assert not (tmp_path / "p").exists()


def test_full_every_bounds_the_directory_and_every_host_still_reaches_the_target(tmp_path, states):
    """full_every 2: versions 1 and 3 are full; publishing 3 deletes 1 and 2, so the directory holds one full version
    and its deltas. A host that pulled version 2 before, and a fresh one, both end at version 4's bytes."""
    pub = D.Publisher(tmp_path / "pub", "xor", "xxh3-128", full_every=2)
    s1, s2, s3 = states
    assert [_publish(pub, s)["full"] for s in (s1, s2)] == [1, 0]
    assert D.pull(tmp_path / "behind", tmp_path / "pub", 2) == 2
    assert [_publish(pub, s)["full"] for s in (s3, s1)] == [1, 0]  # version 4: s1 again, a delta on s3
    assert sorted(p.name for p in (tmp_path / "pub").iterdir() if p.is_dir()) == \
        [D.version_dir(tmp_path / "pub", v).name for v in (3, 4)]
    for host in ("behind", "fresh"):
        assert D.pull(tmp_path / host, tmp_path / "pub", 4) == 2  # the full version 3, then the delta 4
        assert _same(_held(tmp_path / host), s1)
    keep_all = D.Publisher(tmp_path / "all")  # 0 (the default here, slime's behaviour): nothing deleted
    for s in (s1, s2, s3, s1):
        _publish(keep_all, s)
    assert sum(p.is_dir() for p in (tmp_path / "all").iterdir()) == 4
