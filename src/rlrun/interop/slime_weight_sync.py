"""slime's weight-sync mode flags <-> rollout.weight_sync (docs/slime.md, docs/rollout.md "Weight sync").

    --update-weight-mode delta --update-weight-transport disk   <-> rollout.weight_sync=delta
    --update-weight-mode full  --update-weight-transport disk   <-> rollout.weight_sync=disk
    neither (slime: full, nccl)                                 <-> rollout.weight_sync=auto (slime picks CUDA IPC
                                                                    with --colocate, a broadcast without, as auto does)
The delta settings are table rows (slime_table.py): --update-weight-delta-encoding / -checksum, --update-weight-disk-dir
(rollout.delta.dir), --update-weight-local-checkpoint-dir (rollout.delta.local_dir). What slime_validate_args refuses
(slime/utils/arguments.py at 624b824) is refused on import, naming slime's check: delta without the disk transport,
with --colocate or without a local checkpoint dir; the disk transport without --update-weight-disk-dir.
"""
from __future__ import annotations

MODE, TRANSPORT = "--update-weight-mode", "--update-weight-transport"
FLAGS = (MODE, TRANSPORT)
DISK_DIR, LOCAL_DIR = "--update-weight-disk-dir", "--update-weight-local-checkpoint-dir"
# the delta settings' flags -> (rlrun path, slime's default): read by slime in delta mode only
DELTA_FLAGS = {"--update-weight-delta-encoding": ("rollout.delta.encoding", "xor"),
               "--update-weight-delta-checksum": ("rollout.delta.checksum", "xxh3-128"),
               DISK_DIR: ("rollout.delta.dir", None), LOCAL_DIR: ("rollout.delta.local_dir", None)}
_CHOICES = {MODE: ("full", "delta"), TRANSPORT: ("nccl", "disk")}


def decode(dec, occ) -> None:
    """A Decoder's handling of FLAGS (dec: slime_decode._Decoder); settled in finish()."""
    dec.expect(occ, 1)
    if occ.values[0] not in _CHOICES[occ.flag]:
        dec.unknown.append((occ, f"{occ.flag} {occ.values[0]}: slime's choices are {', '.join(_CHOICES[occ.flag])}"))
        return
    dec.weight_sync[occ.flag] = occ


def finish(dec) -> None:
    """After all flags: the transport, or slime's own refusal."""
    got = dec.weight_sync
    mode = got[MODE].values[0] if MODE in got else "full"
    transport = got[TRANSPORT].values[0] if TRANSPORT in got else "nccl"
    first = got.get(MODE) or got.get(TRANSPORT)
    if mode != "delta":
        _drop_delta_settings(dec, transport)
    if first is None:
        return
    if transport == "disk" and DISK_DIR not in dec.seen:
        dec.unknown.append((got.get(TRANSPORT) or first, "slime refuses it: --update-weight-transport=disk requires "
                            "--update-weight-disk-dir (a filesystem the trainer and the engines share)"))
        return
    if mode == "delta":
        why = ("requires --update-weight-transport=disk" if transport != "disk" else
               "is not supported with --colocate" if dec.values.get("train.colocate") else
               "requires --update-weight-local-checkpoint-dir" if LOCAL_DIR not in dec.seen else "")
        if why:
            dec.unknown.append((got[MODE], f"slime refuses it: --update-weight-mode=delta {why} "
                                "(slime_validate_args)"))
            return
        dec.set("rollout.weight_sync", "delta", got[MODE])
    elif transport == "disk":
        dec.set("rollout.weight_sync", "disk", got[TRANSPORT])


def _drop_delta_settings(dec, transport: str) -> None:
    """Without delta mode slime reads none of the delta flags but the disk dir (full-mode disk sync: rlrun's disk
    transport writes <run dir>/weight_sync instead): left at rlrun's defaults, each with a note (rlrun validate refuses
    rollout.delta.* set for another transport: it would be ignored)."""
    for flag, (path, default) in DELTA_FLAGS.items():
        if flag not in dec.seen:
            continue
        dec.values[path] = default
        dec.explicit.discard(path)
        why = ("rlrun's disk transport writes <run dir>/weight_sync and every engine reads it there"
               if flag == DISK_DIR and transport == "disk" else
               "slime reads it with --update-weight-mode delta only")
        dec.notes.append(f"{dec.seen[flag].where}: {flag}: not imported: {why}")


def encode(cfg: dict, arrays: dict, comments: dict) -> None:
    """rollout.weight_sync=delta|disk -> slime's mode and transport flags (the rows write the delta settings; slime
    needs a disk dir, which rlrun defaults to the run dir's weight_sync/)."""
    r = cfg["rollout"]
    if r["weight_sync"] not in ("delta", "disk"):
        return
    if r["weight_sync"] == "delta":
        arrays["MISC_ARGS"] += [[MODE, "delta"], [TRANSPORT, "disk"]]
    else:
        arrays["MISC_ARGS"].append([TRANSPORT, "disk"])
    if r["delta"]["dir"] is None:
        arrays["MISC_ARGS"].append([DISK_DIR, "/shared/fs/weight_sync"])
        comments["MISC_ARGS"].append(f"rollout.weight_sync={r['weight_sync']}: rlrun writes under the run dir; slime "
                                     f"needs {DISK_DIR} on a filesystem its engines share (set your own)")
    if r["weight_sync"] == "delta" and r["delta"]["local_dir"] is None:
        arrays["MISC_ARGS"].append([LOCAL_DIR, "/local/nvme/rollout-ckpt"])
        comments["MISC_ARGS"].append(f"rollout.delta.local_dir is null (rlrun: a temp dir per host); slime requires "
                                     f"{LOCAL_DIR} (set your own)")
