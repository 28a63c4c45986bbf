"""slime's weight-sync flags <-> rollout.weight_sync / rollout.delta.* (rlrun.interop.slime_weight_sync): the delta
example's flags import as the delta transport with its settings, slime's own refusals are refused naming slime's
check, and an exported delta run carries the flags back."""
from __future__ import annotations

import pytest

from rlrun.config import load
from rlrun.interop.slime_decode import decode, parse_args
from rlrun.interop.slime_encode import encode

# the delta flags of slime's examples/delta_weight_sync/run-glm4.7-30B-A3B-delta.sh at 624b824
DELTA = ["--update-weight-mode", "delta", "--update-weight-transport", "disk",
         "--update-weight-disk-dir", "/shared/fs/glm47-delta-updates",
         "--update-weight-local-checkpoint-dir", "/local/nvme/glm47-rollout-ckpt",
         "--update-weight-delta-encoding", "xor", "--update-weight-delta-checksum", "xxh3-128"]


def test_the_delta_examples_flags_import_as_the_delta_transport():
    d = decode(parse_args(DELTA))
    assert d.unknown == []
    v = d.values
    assert v["rollout.weight_sync"] == "delta"
    assert (v["rollout.delta.encoding"], v["rollout.delta.checksum"]) == ("xor", "xxh3-128")
    assert (v["rollout.delta.dir"], v["rollout.delta.local_dir"]) == ("/shared/fs/glm47-delta-updates",
                                                                      "/local/nvme/glm47-rollout-ckpt")
    cfg = load([f"{k}={val}" for k, val in v.items() if k.startswith("rollout.delta.")] + ["rollout.weight_sync=delta"])
    assert cfg.rollout.delta.local_dir == "/local/nvme/glm47-rollout-ckpt"


def test_overwrite_and_adler32_and_full_mode_disk():
    v = decode(parse_args(DELTA[:8] + ["--update-weight-delta-encoding", "overwrite",
                                       "--update-weight-delta-checksum", "adler32"])).values
    assert (v["rollout.delta.encoding"], v["rollout.delta.checksum"]) == ("overwrite", "adler32")
    d = decode(parse_args(["--update-weight-transport", "disk", "--update-weight-disk-dir", "/shared/x"]))
    assert d.unknown == [] and d.values["rollout.weight_sync"] == "disk"
    assert any("--update-weight-disk-dir" in n and "<run dir>/weight_sync" in n for n in d.notes)
    assert d.values["rollout.delta.dir"] is None  # not read by the disk transport: validate would refuse it
    d = decode(parse_args(["--update-weight-delta-encoding", "overwrite"]))  # slime reads it in delta mode only
    assert d.unknown == [] and d.values["rollout.delta.encoding"] == "xor"
    assert any("--update-weight-delta-encoding: not imported: slime reads it with --update-weight-mode delta only" in n
               for n in d.notes)
    assert "rollout.weight_sync" not in decode(parse_args(["--rollout-batch-size", "2"])).values  # auto stays


@pytest.mark.parametrize("flags, why", [
    (["--update-weight-mode", "delta", "--update-weight-local-checkpoint-dir", "/l"],
     "--update-weight-mode=delta requires --update-weight-transport=disk"),
    (DELTA + ["--colocate"], "--update-weight-mode=delta is not supported with --colocate"),
    (DELTA[:6], "--update-weight-mode=delta requires --update-weight-local-checkpoint-dir"),
    (["--update-weight-transport", "disk"], "--update-weight-transport=disk requires --update-weight-disk-dir"),
    (["--update-weight-mode", "partial"], "slime's choices are full, delta"),
])
def test_what_slime_refuses_is_refused_naming_slimes_check(flags, why):
    d = decode(parse_args(flags))
    assert any(why in w for _, w in d.unknown), d.unknown
    assert d.values.get("rollout.weight_sync") is None


def test_an_exported_delta_run_carries_the_flags_back():
    cfg = load(["rollout.weight_sync=delta", "rollout.delta.encoding=overwrite", "rollout.delta.dir=/shared/d",
                "rollout.delta.local_dir=/nvme/l"]).to_dict()
    flags = [f for a in encode(cfg).arrays.values() for f in a]
    for flag, value in (("--update-weight-mode", "delta"), ("--update-weight-transport", "disk"),
                        ("--update-weight-delta-encoding", "overwrite"), ("--update-weight-disk-dir", "/shared/d"),
                        ("--update-weight-local-checkpoint-dir", "/nvme/l")):
        assert [flag, value] in flags
    assert not any(f[0] == "--update-weight-delta-checksum" for f in flags)  # slime's default: left out
    back = decode(parse_args([x for f in flags for x in f])).values
    assert (back["rollout.weight_sync"], back["rollout.delta.encoding"], back["rollout.delta.local_dir"]) == \
        ("delta", "overwrite", "/nvme/l")
