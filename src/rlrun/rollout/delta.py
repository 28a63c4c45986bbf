"""Delta weight sync's files (rollout.weight_sync=delta): the trainer publishes each sync as a version directory, an
engine host pulls the versions into a host-local checkpoint and reloads it through /update_weights_from_disk.

The layout is slime's (slime 624b824: slime/utils/disk_delta.py, the trainer end in
slime/backends/megatron_utils/update_weight/update_weight_from_disk_delta.py, the engine end in its SGLang patch
docker/patch/latest/sglang-pull_weights.patch, sglang.srt.weight_sync.local_checkpoint), so either side reads the
other's stream:

    <dir>/weight_v{N:06d}/   one version, a canonical HF checkpoint directory:
        full:  model.safetensors + model.safetensors.index.json (no delta_encoding in its metadata)
        delta: model-00000-of-00001.safetensors holding, per changed tensor, its zstd-compressed diff (uint8) and in
               the file's metadata the checksum of the tensor's new bytes; the index's metadata: version,
               base_version (N-1), delta_encoding (xor | overwrite), compression_format (zstd), checksum_format
    <local_dir>/.weight_sync/state.json   the version the host-local checkpoint holds (and lock: one pull per host)

Encodings are byte-level and dtype-blind: xor writes new ^ old (applied exactly once, on its base version);
overwrite writes the changed byte positions (u4 count, u4 positions) and their new bytes (idempotent).
rlrun's additions, ignored by slime's reader: every version's index metadata carries `stream` (an id the trainer
draws when it starts publishing), and <dir>/LATEST names the newest version and its stream. A host whose local
checkpoint belongs to another stream (a previous run's) starts over from the newest full version; rlrun's first
publish of a stream is always a full version, so a pull never needs the engine's own model files.

Pure numpy + zstandard + safetensors; no torch, no ray.
"""
from __future__ import annotations

import fcntl
import json
import shutil
import struct
import uuid
import zlib
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

ENCODINGS = ("xor", "overwrite")
CHECKSUMS = ("xxh3-128", "blake3", "adler32")
CHECKSUM_MODULES = {"xxh3-128": "xxhash", "blake3": "blake3"}  # adler32: zlib (stdlib)
SYNC_DIR = ".weight_sync"   # in a local checkpoint: state.json (the version it holds) and the pull's lock
INDEX = "model.safetensors.index.json"
FULL_FILE = "model.safetensors"
DELTA_FILE = "model-00000-of-00001.safetensors"
LATEST = "LATEST"


class _Adler32:
    def __init__(self) -> None:
        self.value = 1

    def update(self, data) -> None:
        self.value = zlib.adler32(data, self.value)

    def hexdigest(self) -> str:
        return f"{self.value:08x}"


def checksum(algorithm: str, buf) -> str:
    """The per-tensor checksum of `buf`'s bytes (slime's --update-weight-delta-checksum algorithms)."""
    if algorithm == "xxh3-128":
        import xxhash

        h = xxhash.xxh3_128()
    elif algorithm == "blake3":
        import blake3

        h = blake3.blake3()
    elif algorithm == "adler32":
        h = _Adler32()
    else:
        raise ValueError(f"unknown checksum {algorithm!r}: use one of {', '.join(CHECKSUMS)}")
    h.update(buf)
    return h.hexdigest()


def version_dir(root: str | Path, version: int) -> Path:
    return Path(root) / f"weight_v{version:06d}"


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


# ---- trainer end ---------------------------------------------------------------------------------------------

def encode(encoding: str, new, old):
    """(payload before compression, changed bytes) of one tensor's new bytes against its old bytes (uint8 arrays)."""
    import numpy as np

    if encoding == "xor":
        diff = np.bitwise_xor(new, old)
        return diff, int(np.count_nonzero(diff))
    if encoding == "overwrite":
        mask = new != old
        pos = np.flatnonzero(mask).astype("<u4")
        return np.concatenate([np.array([pos.size], "<u4").view(np.uint8), pos.view(np.uint8), new[mask]]), pos.size
    raise ValueError(f"unknown delta encoding {encoding!r}: use one of {', '.join(ENCODINGS)}")


class Publisher:
    """The trainer's end, kept across its syncs: the snapshot of the bytes last published (what the engines' local
    checkpoints hold after pulling it) and the version counter. publish(arrays) writes the next version: full the
    first time (or when the tensors' names, shapes or dtypes changed), a delta of the changed tensors after.
    full_every N > 0: every N-th version is full again and the versions before it are deleted (a pull from any point
    starts at the newest full version at or below its target, so none needs them): the directory holds at most one
    full version and N - 1 deltas instead of growing with every sync. 0: every version kept (slime's)."""

    def __init__(self, root: str | Path, encoding: str = "xor", checksum_format: str = "xxh3-128",
                 full_every: int = 0):
        if encoding not in ENCODINGS:
            raise ValueError(f"unknown delta encoding {encoding!r}: use one of {', '.join(ENCODINGS)}")
        checksum(checksum_format, b"")  # an unknown or missing algorithm fails here, before anything is written
        self.root, self.encoding, self.checksum_format = Path(root), encoding, checksum_format
        self.full_every = full_every
        self.stream = uuid.uuid4().hex[:16]
        self.version = 0
        self.snapshot: dict[str, Any] = {}   # name -> its published bytes (uint8, flat)
        self.layout: dict[str, tuple] = {}   # name -> (dtype, shape): a change publishes a full version
        self.last: dict[str, int] = {}       # the latest publish: bytes written, changed bytes, total bytes, full

    def publish(self, arrays: dict[str, tuple[Any, str, tuple]], full_writer) -> dict[str, int]:
        """arrays: name -> (its bytes as a flat uint8 numpy array, dtype name, shape). full_writer(dir): writes the
        full checkpoint file(s) into dir (the trainer's own safetensors writer, so a full version is what the disk
        transport writes). Returns and keeps as .last the counts of this publish."""
        import numpy as np

        if self.version == 0:  # a stream starts clean: a previous run's versions would chain on the wrong base
            shutil.rmtree(self.root, ignore_errors=True)
        self.root.mkdir(parents=True, exist_ok=True)
        layout = {n: (dt, tuple(shape)) for n, (_, dt, shape) in arrays.items()}
        rebase = bool(self.full_every) and self.version % self.full_every == 0
        full = self.version == 0 or layout != self.layout or rebase
        self.version += 1
        out = version_dir(self.root, self.version)
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        total = sum(int(a.size) for a, _, _ in arrays.values())
        meta = {"version": f"{self.version:06d}", "stream": self.stream}
        if full:
            full_writer(out)
            weight_map = {n: FULL_FILE for n in arrays}
            changed = total
        else:
            import safetensors.numpy
            import zstandard

            compress = zstandard.ZstdCompressor(level=1)
            payloads, sums, changed = {}, {}, 0
            for name, (new, _, _) in arrays.items():
                diff, n = encode(self.encoding, new, self.snapshot[name])
                if n:
                    changed += n
                    payloads[name] = np.frombuffer(compress.compress(diff.tobytes()), dtype=np.uint8)
                    sums[name] = checksum(self.checksum_format, new)
            if payloads:
                _atomic_write(out / DELTA_FILE, safetensors.numpy.save(payloads, metadata=sums))
            weight_map = {n: DELTA_FILE for n in payloads}
            meta.update(base_version=f"{self.version - 1:06d}", delta_encoding=self.encoding,
                        compression_format="zstd", checksum_format=self.checksum_format)
        _atomic_write(out / INDEX, json.dumps({"metadata": meta, "weight_map": weight_map}).encode())
        self.snapshot = {n: a.copy() for n, (a, _, _) in arrays.items()}
        self.layout = layout
        written = sum(f.stat().st_size for f in out.iterdir() if f.name != INDEX)
        self.last = {"bytes": written, "changed_bytes": changed, "total_bytes": total, "full": int(full),
                     "version": self.version}
        # LATEST: the newest version and its stream, with this publish's counts (the driver's metrics read them)
        _atomic_write(self.root / LATEST, json.dumps({**self.last, "stream": self.stream}).encode())
        if full:  # nothing pulls below the newest full version any more
            for v in range(1, self.version):
                shutil.rmtree(version_dir(self.root, v), ignore_errors=True)
        return self.last


def published(root: str | Path) -> dict:
    """root's LATEST: the newest version, its stream and its publish's counts (Publisher.last: bytes written,
    changed_bytes, total_bytes, full)."""
    try:
        return json.loads((Path(root) / LATEST).read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"no published weight version under {root} ({LATEST} is missing): the trainer's "
                                "delta write did not run") from None


# ---- engine end ----------------------------------------------------------------------------------------------

def _index_meta(vdir: Path) -> dict:
    if not vdir.is_dir():
        raise FileNotFoundError(f"published weight version missing: {vdir}")
    try:
        return json.loads((vdir / INDEX).read_text()).get("metadata", {})
    except FileNotFoundError:
        return {}  # an ordinary HF checkpoint without an index: a full version


def _tensor_locations(ckpt_dir: Path) -> dict[str, tuple[Path, int, int]]:
    """Each tensor's (file, byte offset, nbytes), from the safetensors headers."""
    out = {}
    for path in sorted(ckpt_dir.glob("*.safetensors")):
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
        for name, info in header.items():
            if name != "__metadata__":
                begin, end = info["data_offsets"]
                out[name] = (path, 8 + n + begin, end - begin)
    return out


@contextmanager
def _lock(local_dir: Path) -> Iterator[None]:
    sync = local_dir / SYNC_DIR
    sync.mkdir(parents=True, exist_ok=True)
    with open(sync / "lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _state(local_dir: Path) -> dict | None:
    try:
        return json.loads((local_dir / SYNC_DIR / "state.json").read_text())
    except FileNotFoundError:
        return None


def _set_state(local_dir: Path, version: int, stream: str | None) -> None:
    _atomic_write(local_dir / SYNC_DIR / "state.json",
                  json.dumps({"version": f"{version:06d}", "stream": stream}).encode())


def _reset(src: Path, local_dir: Path, version: int, stream: str | None) -> None:
    """local_dir becomes an exact copy of the full checkpoint in src (other files pruned)."""
    local_dir.mkdir(parents=True, exist_ok=True)
    files = [p for p in src.iterdir() if p.is_file()]
    for p in files:
        shutil.copyfile(p, local_dir / p.name)
        if (local_dir / p.name).stat().st_size != p.stat().st_size:
            raise RuntimeError(f"size mismatch copying {p} to {local_dir}")
    names = {p.name for p in files}
    for p in local_dir.iterdir():
        if p.is_file() and p.name not in names:
            p.unlink()
    _set_state(local_dir, version, stream)


def apply_delta(local_dir: Path, vdir: Path, meta: dict) -> None:
    """One delta version applied in place to local_dir's tensors; each changed tensor's new bytes checked against the
    trainer's checksum (a mismatch raises: never serve bad weights)."""
    import mmap

    import numpy as np
    import safetensors
    import zstandard

    if meta.get("compression_format") != "zstd":
        raise ValueError(f"{vdir}: compression {meta.get('compression_format')!r} is not supported (zstd)")
    encoding, algorithm = meta["delta_encoding"], meta["checksum_format"]
    if encoding not in ENCODINGS:
        raise ValueError(f"{vdir}: delta encoding {encoding!r} is not supported ({', '.join(ENCODINGS)})")
    locations = _tensor_locations(local_dir)
    decompress = zstandard.ZstdDecompressor()
    bad, maps = [], {}
    try:
        for delta_file in sorted(vdir.glob("*.safetensors")):
            with safetensors.safe_open(str(delta_file), "np") as f:
                want = f.metadata() or {}
                for name in f.keys():
                    path, offset, nbytes = locations[name]
                    if path not in maps:
                        fh = open(path, "r+b")
                        maps[path] = (fh, mmap.mmap(fh.fileno(), 0))
                    region = np.ndarray((nbytes,), dtype=np.uint8, buffer=maps[path][1], offset=offset)
                    payload = np.frombuffer(decompress.decompress(f.get_tensor(name).tobytes()), dtype=np.uint8)
                    if encoding == "xor":
                        np.bitwise_xor(region, payload, out=region)
                    else:
                        count = int(payload[:4].view("<u4")[0])
                        positions = payload[4:4 + 4 * count].view("<u4")
                        region[positions] = payload[4 + 4 * count:]
                    if checksum(algorithm, region) != want.get(name):
                        bad.append(name)
    finally:
        for fh, mm in maps.values():
            mm.flush()
            mm.close()
            fh.close()
    if bad:
        raise RuntimeError(f"checksum mismatch for {len(bad)} tensor(s) after applying {vdir}: {sorted(bad)[:20]}")


def pull(local_dir: str | Path, source_dir: str | Path, target_version: int, base_dir: str | Path | None = None) -> int:
    """Brings the host-local checkpoint local_dir to target_version of the stream under source_dir: from the newest
    full version at or below the target (or what local_dir already holds of the same stream), then each delta in
    order. A lock makes the engines of one host pull once (the others find it done). base_dir: the engine's own
    checkpoint, version 0 of a stream that starts with deltas (slime's); rlrun's streams start full. Returns the
    number of versions applied or copied."""
    local_dir, source_dir = Path(local_dir), Path(source_dir)
    target_meta = _index_meta(version_dir(source_dir, target_version)) if target_version > 0 else {}
    stream = target_meta.get("stream")
    with _lock(local_dir):
        state = _state(local_dir)
        applied = int(state["version"]) if state and state.get("stream") == stream else None
        if applied is not None and applied > target_version:
            applied = None  # ahead of the target: not this stream's history
        floor = applied if applied is not None else 0
        start = target_version
        while start > floor and "delta_encoding" in _index_meta(version_dir(source_dir, start)):
            start -= 1
        done = 0
        if applied is None or start > applied:
            if start == 0:
                if base_dir is None:
                    raise FileNotFoundError(f"{source_dir}: no full version at or below {target_version} and no "
                                            "base checkpoint to start from")
                seed = Path(base_dir)
            else:
                seed = version_dir(source_dir, start)
            _reset(seed, local_dir, start, stream)
            done += 1
        else:
            start = applied
        for v in range(start + 1, target_version + 1):
            vdir = version_dir(source_dir, v)
            meta = _index_meta(vdir)
            if int(meta["base_version"]) != v - 1:
                raise RuntimeError(f"{vdir}: a delta on version {meta['base_version']}, local checkpoint at {v - 1}")
            apply_delta(local_dir, vdir, meta)
            _set_state(local_dir, v, stream)
            done += 1
        return done
