"""Moving weights into a rollout engine: serialisation, bucketing, checksums, broadcast groups.

Three transports, the same three SGLang offers:
  from_tensor       SGLang's payload (serialize_ipc): base64 of a ForkingPickler pickle of
                    [(name, tensor)] - CUDA tensors as CUDA IPC handles (receiver on the same GPU),
                    CPU tensors as named shared-memory files - so sender and receiver share a host
                    (colocated). The hf engine reads it exactly like SGLang's tp_worker does.
                    Portable variants (hf engine only): base64(torch.save(...)) with the bytes in
                    the HTTP body (serialize_named_tensors; works across hosts, replayable), or a
                    local file path with load_format="rlrun_file".
  from_distributed  torch.distributed broadcast from trainer rank 0 to every engine (gloo on CPU,
                    nccl on GPU) in a process group made only for weight sync.
  from_disk         an HF checkpoint directory (safetensors).
"""
from __future__ import annotations

import base64
import datetime
import difflib
import hashlib
import io
import math
import pickle
from pathlib import Path
from typing import Iterable, Iterator

import torch

FILE_LOAD_FORMAT = "rlrun_file"


def serialize_named_tensors(named: list[tuple[str, torch.Tensor]]) -> str:
    buf = io.BytesIO()
    torch.save([(n, t.detach().cpu().contiguous()) for n, t in named], buf)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def serialize_ipc(named: list[tuple[str, torch.Tensor]]) -> tuple[str, list[torch.Tensor]]:
    """SGLang's own /update_weights_from_tensor payload (its MultiprocessingSerializer format).
    Returns (payload, keepalive): the sender must hold `keepalive` until the engine answered, since
    the engine maps the sender's memory. CPU tensors are copied into shared memory first (pickling
    would otherwise move the caller's own storages there)."""
    import torch.multiprocessing as tmp
    from multiprocessing.reduction import ForkingPickler

    # CPU storages travel by shm file name; the default fd strategy needs the two processes to
    # share a multiprocessing authkey, which a trainer and an engine server never do. The strategy
    # is read while pickling only, so the process-wide setting is restored right after.
    shared = [(n, t.detach() if t.is_cuda else t.detach().clone()) for n, t in named]
    return _ipc_pickle(shared, any(t.is_cuda for _, t in shared)), [t for _, t in shared]


def _ipc_pickle(obj, cuda: bool) -> str:
    """base64 of a ForkingPickler pickle of obj: CPU storages as shared-memory files, CUDA ones as IPC
    handles naming their GPU by UUID."""
    import torch.multiprocessing as tmp
    from multiprocessing.reduction import ForkingPickler

    # CPU storages travel by shm file name; the default fd strategy needs the two processes to
    # share a multiprocessing authkey, which a trainer and an engine server never do. The strategy
    # is read while pickling only, so the process-wide setting is restored right after.
    previous = tmp.get_sharing_strategy()
    tmp.set_sharing_strategy("file_system")
    try:
        buf = io.BytesIO()
        pickler = ForkingPickler(buf)
        if cuda:
            for cls in (torch.Tensor, torch.nn.Parameter):  # this pickler only: torch stays unpatched
                pickler.dispatch_table[cls] = _reduce_tensor_by_uuid
        pickler.dump(obj)
    finally:
        tmp.set_sharing_strategy(previous)
    return base64.b64encode(buf.getvalue()).decode("ascii")


FLAT_ALIGN = 16  # bytes: every tensor of a flattened IPC bucket starts at a multiple (a dtype view needs it)


def flatten_named(named: list[tuple[str, torch.Tensor]], align: int = FLAT_ALIGN) -> tuple[torch.Tensor, list]:
    """A bucket as SGLang's FlattenedTensorBucket holds it (sglang/srt/weight_sync/tensor_bucket.py, 0.5.16): one
    uint8 buffer on the tensors' device and, per tensor, metadata with the attributes SGLang's
    _update_weights_from_flattened_bucket reads (name, shape, dtype, start_idx, end_idx, numel; numel counts
    bytes). Each tensor starts at a multiple of `align` bytes (SGLang slices [start_idx:end_idx] and views it
    as the dtype, which needs an aligned offset; the gaps are never read). The metadata are
    types.SimpleNamespace, which SGLang's SafeUnpickler admits (its "types." prefix) and which needs no sglang
    in the sender's process."""
    from types import SimpleNamespace

    if not named:
        raise ValueError("an empty bucket cannot be flattened")
    device = named[0][1].device
    meta, start, pieces, pad = [], 0, [], torch.zeros(align, dtype=torch.uint8, device=device)
    for name, t in named:
        n = t.numel() * t.element_size()
        meta.append(SimpleNamespace(name=name, shape=torch.Size(t.shape), dtype=t.dtype, start_idx=start,
                                    end_idx=start + n, numel=n))
        gap = -(-n // align) * align - n
        pieces += ([t.detach().reshape(-1).view(torch.uint8)] if n else []) + ([pad[:gap]] if gap else [])
        start += n + gap
    # one concatenation for the bucket: a copy per tensor cost ~6 Python-level ops each, most of a push's staging
    # for the ~300 tensors of a 0.6B model (2026-11-28, docs/benchmarks.md)
    flat = torch.cat(pieces) if pieces else torch.empty(0, dtype=torch.uint8, device=device)
    return flat, meta


def unflatten_named(flat: torch.Tensor, metadata: list) -> list[tuple[str, torch.Tensor]]:
    """(name, tensor) views of a flattened bucket (flatten_named's, or SGLang's FlattenedTensorBucket's)."""
    out = []
    for m in metadata:
        dtype, shape = m.dtype, torch.Size(m.shape)
        want = math.prod(shape) * dtype.itemsize
        if not 0 <= m.start_idx <= m.end_idx <= flat.numel() or m.end_idx - m.start_idx != want:
            raise ValueError(f"flattened bucket: {m.name!r} ({dtype}, {tuple(shape)}: {want} bytes) claims bytes "
                             f"[{m.start_idx}, {m.end_idx}) of a {flat.numel()}-byte buffer")
        part = flat[m.start_idx:m.end_idx]
        if m.start_idx % dtype.itemsize:
            part = part.clone()  # a view needs an offset aligned to the element size
        out.append((m.name, part.view(dtype).reshape(shape)))
    return out


def serialize_ipc_flattened(named: list[tuple[str, torch.Tensor]]) -> tuple[str, list[torch.Tensor]]:
    """A bucket as SGLang's /update_weights_from_tensor payload with load_format="flattened_bucket": the pickle
    of {"flattened_tensor": one uint8 buffer, "metadata": [...]} (flatten_named), so the engine opens one CUDA
    IPC handle (one shared-memory file on the CPU) per bucket instead of one per tensor. Returns (payload,
    keepalive) as serialize_ipc does; the buffer is a copy, so the caller's tensors stay private."""
    flat, meta = flatten_named(named)
    return _ipc_pickle({"flattened_tensor": flat, "metadata": meta}, flat.is_cuda), [flat]


def release_sent() -> None:
    """Frees the sender's CUDA memory of IPC payloads every receiver has let go of. torch keeps a sent block out of
    its caching allocator (CudaIPCSentData, "limbo") until the receivers drop it AND the sender collects; it collects
    on its own only when one of its allocations would otherwise fail, so another process on that GPU (a colocated
    engine resuming its KV cache) meets the full GPU first. Measured 2026-11-28 on four H200s: without it trainer
    rank 0's GPU grew by one pushed state (7.3 GB, Qwen3-4B) per step until its engine died resuming memory at step 7
    (docs/benchmarks.md). slime collects after its tensor pushes too (torch.cuda.ipc_collect)."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.ipc_collect()


# A CUDA IPC handle names its GPU by index, which means another GPU in a process with a different
# CUDA_VISIBLE_DEVICES. As SGLang does (monkey_patch_torch_reductions, which its tp worker applies
# before deserializing), the sender writes the device's UUID there and the receiver maps it to its
# own index.
_CUDA_DEVICE_ARG = 6  # position of storage_device in rebuild_cuda_tensor's arguments


def device_uuid(index: int) -> str:
    return str(torch.cuda.get_device_properties(index).uuid)


def local_cuda_index(device: int | str) -> int:
    """A device named by index (same numbering) or UUID -> this process's index for it."""
    if isinstance(device, int):
        return device
    for i in range(torch.cuda.device_count()):
        if device_uuid(i) == device:
            return i
    raise ValueError(f"weight payload lives on GPU {device}, which this process does not see "
                     f"({torch.cuda.device_count()} visible GPUs): sender and engine must share a host "
                     f"and the GPU must be in the engine's CUDA_VISIBLE_DEVICES")


def _reduce_tensor_by_uuid(t: torch.Tensor):
    from torch.multiprocessing import reductions

    fn, args = reductions.reduce_tensor(t)
    uuid = getattr(torch.cuda.get_device_properties(t.device.index), "uuid", None)
    if fn is reductions.rebuild_cuda_tensor and uuid is not None:  # builds without it keep the index
        args = list(args)
        args[_CUDA_DEVICE_ARG] = str(uuid)
        args = tuple(args)
    return fn, args


def _rebuild_cuda_tensor_by_uuid(*args):
    from torch.multiprocessing import reductions

    args = list(args)
    args[_CUDA_DEVICE_ARG] = local_cuda_index(args[_CUDA_DEVICE_ARG])
    return reductions.rebuild_cuda_tensor(*args)


class _WeightsUnpickler(pickle.Unpickler):
    """Loads only what a [(name, tensor)] pickle needs: a payload arrives over HTTP, and pickle
    would otherwise run any callable it names (SGLang restricts its unpickler the same way)."""

    ALLOWED = ("builtins.", "collections.", "copyreg.", "torch.", "multiprocessing.reduction.",
               "multiprocessing.resource_sharer.")
    ALLOWED_CLASSES = {("types", "SimpleNamespace")}  # a flattened bucket's metadata (flatten_named)

    def find_class(self, module, name):
        if (module, name) in {("builtins", "eval"), ("builtins", "exec"), ("builtins", "compile")} \
                or not ((module + ".").startswith(self.ALLOWED) or (module, name) in self.ALLOWED_CLASSES):
            raise pickle.UnpicklingError(f"weight payload refers to {module}.{name}, which is not allowed")
        if (module, name) == ("torch.multiprocessing.reductions", "rebuild_cuda_tensor"):
            return _rebuild_cuda_tensor_by_uuid  # accepts an index (unpatched senders) or a UUID
        return super().find_class(module, name)


def deserialize_named_tensors(payload: str, load_format: str | None) -> list[tuple[str, torch.Tensor]]:
    if load_format == FILE_LOAD_FORMAT:
        return torch.load(payload, map_location="cpu", weights_only=True)
    if load_format not in (None, FLATTENED_BUCKET):
        raise ValueError(f"load_format={load_format!r} is not supported by the hf engine (None: the "
                         f"IPC pickle or base64 torch.save bytes, {FLATTENED_BUCKET!r}: the flattened "
                         f"IPC bucket, {FILE_LOAD_FORMAT!r}: a local file path)")
    data = base64.b64decode(payload)
    if load_format is None and data[:4] == b"PK\x03\x04":  # torch.save's zip container
        return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    import torch.multiprocessing as _reductions  # noqa: F401 - registers the rebuild functions the pickle names

    obj = _WeightsUnpickler(io.BytesIO(data)).load()
    if load_format == FLATTENED_BUCKET:
        if not isinstance(obj, dict) or not {"flattened_tensor", "metadata"} <= set(obj):
            raise ValueError(f"a {FLATTENED_BUCKET!r} payload is a dict with flattened_tensor and metadata "
                             f"(a FlattenedTensorBucket); got {type(obj).__name__}")
        return unflatten_named(obj["flattened_tensor"], obj["metadata"])
    return obj


def buckets(named: Iterable[tuple[str, torch.Tensor]], bucket_bytes: int) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """Groups tensors into lists of at most bucket_bytes (a larger single tensor gets its own)."""
    bucket, size = [], 0
    for name, tensor in named:
        nbytes = tensor.numel() * tensor.element_size()
        if bucket and size + nbytes > bucket_bytes:
            yield bucket
            bucket, size = [], 0
        bucket.append((name, tensor))
        size += nbytes
    if bucket:
        yield bucket


class Buckets:
    """A sync state that comes already in buckets, one at a time (TrainerBackend.sync_buckets: megatron gathers each
    bucket on the GPU as it is asked for, so the state never makes a round trip through host memory): the transports
    push each bucket as it comes (as_buckets) instead of bucketing a list of (name, tensor) pairs."""

    def __init__(self, stream: Iterable[list[tuple[str, torch.Tensor]]]):
        self.stream = iter(stream)


def as_buckets(named, bucket_bytes: int) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """A transport's input as buckets: a Buckets stream as it comes, (name, tensor) pairs grouped by `buckets`."""
    return named.stream if isinstance(named, Buckets) else buckets(named, bucket_bytes)


def with_last(items: Iterable) -> Iterator[tuple[object, bool]]:
    """(item, is_last) pairs, looking one item ahead (the last bucket of a push carries the new version)."""
    it, end = iter(items), object()
    cur = next(it, end)
    while cur is not end:
        nxt = next(it, end)
        yield cur, nxt is end
        cur = nxt


def checksum(named: dict[str, torch.Tensor]) -> str:
    """sha256 over sorted (name, dtype, shape, bytes): equal iff the weights are bit-identical."""
    h = hashlib.sha256()
    for name in sorted(named):
        t = named[name].detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


FINGERPRINT_CHUNK = 1 << 24  # elements per step: bounds the temporaries of a dtype cast
FINGERPRINT_ROW = 1024  # a chunk is summed as a [rows, ROW] grid (see _position_sums)
_INT_OF_WIDTH = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _bits(x: torch.Tensor) -> torch.Tensor:
    """The elements' bit patterns as integers: floats viewed as the integer of their width (no copy;
    +0/-0 and every NaN payload differ), bools as uint8, integers as they are."""
    if x.is_floating_point() or x.is_complex():
        return x.view(_INT_OF_WIDTH[x.element_size()])
    return x.view(torch.uint8) if x.dtype == torch.bool else x


def _position_sums(b: torch.Tensor, start: int) -> torch.Tensor:
    """[sum b_j, sum b_j * (start + j + 1)] of a 1-D integer tensor, in wrapping int64.

    No temporary the size of b: viewed as a grid [m, K], element (r, c) has position r*K + c, so
    the weighted sum is K * sum_r r * rowsum_r + sum_c (c + 1) * colsum_c, two reductions that
    read b once each (int64 accumulation); the tail beyond m*K is summed directly."""
    k = FINGERPRINT_ROW
    n, m = b.numel(), b.numel() // k
    out = torch.zeros(2, dtype=torch.int64, device=b.device)
    if m:
        grid = b[: m * k].view(m, k)
        rows = grid.sum(dim=1, dtype=torch.int64)
        cols = grid.sum(dim=0, dtype=torch.int64)
        out[0] = rows.sum()
        out[1] = k * (rows * torch.arange(m, dtype=torch.int64, device=b.device)).sum() \
            + (cols * torch.arange(1, k + 1, dtype=torch.int64, device=b.device)).sum()
    if n > m * k:
        tail = b[m * k:].to(torch.int64)
        out[0] += tail.sum()
        out[1] += (tail * torch.arange(m * k + 1, n + 1, dtype=torch.int64, device=b.device)).sum()
    out[1] += start * out[0]  # positions are global: shift this chunk's weights by `start`
    return out


@torch.no_grad()
def _tensor_sums(t: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    """[sum(b_i), sum(b_i * (i+1))] over the tensor's bit patterns b_i, in int64 on its own device.

    Integer sums wrap modulo 2^64, which is associative: any order of reduction (CPU, GPU, chunk
    and grid sizes) gives the same result. A flipped bit changes the first sum by +-2^k; moving
    values between positions changes the second."""
    flat = t.detach().reshape(-1)
    out = torch.zeros(2, dtype=torch.int64, device=flat.device)
    for start in range(0, flat.numel(), FINGERPRINT_CHUNK):
        x = flat[start:start + FINGERPRINT_CHUNK]
        if dtype is not None and x.is_floating_point():
            x = x.to(dtype)
        out += _position_sums(_bits(x), start)
    return out


class Fingerprint:
    """A cheap identity of a state dict, bit-exact like `checksum` but computed where the tensors
    are (GPU) with two integer reductions per tensor instead of hashing every byte on the host.

    dtype: the dtype the receiving engine holds floating tensors in; the sender casts to it first,
    so a bf16 trainer state and the fp32 engine it was loaded into agree (as they must: the engine
    holds exactly the upcast values), while an fp32 state that the engine rounded to bf16 is
    compared after the same rounding. The digest covers the names, the dtype compared, the shapes
    and both sums: a missing, renamed or swapped tensor, a flipped bit or moved elements change it.
    Fed bucket by bucket (add), so a sender fingerprints each bucket while it is on the GPU."""

    def __init__(self, dtype: torch.dtype | None = None):
        self.dtype = dtype
        self._rows: list[tuple[str, str, tuple[int, ...]]] = []
        self._sums: list[torch.Tensor] = []

    def add(self, named: Iterable[tuple[str, torch.Tensor]]) -> None:
        for name, t in named:
            # FP8 weights (rollout.fp8) are held by the engine as sent: never cast, or the fingerprint would not be
            # that of what was sent
            cast = self.dtype is not None and t.is_floating_point() and t.element_size() > 1
            self._rows.append((name, dtype_name(self.dtype if cast else t.dtype), tuple(t.shape)))
            self._sums.append(_tensor_sums(t, self.dtype if cast else None))

    def hexdigest(self) -> str:
        by_device: dict[torch.device, list[int]] = {}
        for i, s in enumerate(self._sums):
            by_device.setdefault(s.device, []).append(i)
        sums: list[list[int]] = [[]] * len(self._sums)
        for device, idx in by_device.items():  # one device-to-host copy per device
            for i, pair in zip(idx, torch.stack([self._sums[i] for i in idx]).tolist()):
                sums[i] = pair
        h = hashlib.sha256()
        for (name, dtype, shape), (s1, s2) in sorted(zip(self._rows, sums)):
            h.update(f"{name}|{dtype}|{shape}|{s1}|{s2}\n".encode())
        return h.hexdigest()


def fingerprint(named: dict[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]],
                dtype: torch.dtype | None = None) -> str:
    """Fingerprint of a whole state (== GET {engine}/rlrun/weights_checksum?kind=fingerprint)."""
    fp = Fingerprint(dtype)
    fp.add(named.items() if isinstance(named, dict) else named)
    return fp.hexdigest()


@torch.no_grad()
def load_into(model: torch.nn.Module, named: Iterable[tuple[str, torch.Tensor]]) -> int:
    """Copies tensors into the model's parameters/buffers by HF name; returns how many."""
    state = model.state_dict()  # tensors share storage with the parameters: copy_ updates the model
    count = 0
    for name, tensor in named:
        if name not in state:
            close = difflib.get_close_matches(name, list(state), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise KeyError(f"weight {name!r} is not a parameter of the engine's model{hint}")
        target = state[name]
        if tuple(target.shape) != tuple(tensor.shape):
            raise ValueError(f"weight {name!r}: engine shape {tuple(target.shape)} != sent "
                             f"{tuple(tensor.shape)}")
        target.copy_(tensor.to(device=target.device, dtype=target.dtype))
        count += 1
    return count


def load_hf_dir(path: str | Path) -> list[tuple[str, torch.Tensor]]:
    from safetensors.torch import load_file

    files = sorted(Path(path).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors in {path} (update_weights_from_disk needs an HF "
                                f"checkpoint dir, e.g. written by save_pretrained)")
    return [item for f in files for item in load_file(str(f)).items()]


FLATTENED_BUCKET = "flattened_bucket"  # SGLang's load_format: a bucket as one uint8 buffer


def flatten_bucket(tensors: list[torch.Tensor]) -> torch.Tensor:
    """The tensors' bytes, concatenated in order into one uint8 buffer: what SGLang's
    FlattenedTensorBucket builds (tensor.flatten().view(uint8), concatenated), so one collective
    moves the whole bucket instead of one per tensor."""
    return torch.cat([t.contiguous().reshape(-1).view(torch.uint8) for t in tensors])


def tensor_bytes(dtypes: list[torch.dtype], shapes: list[list[int]]) -> list[int]:
    """Byte size of each (dtype, shape): how a receiver sizes a flattened bucket before it arrives."""
    return [math.prod(shape) * dtype.itemsize for dtype, shape in zip(dtypes, shapes)]


def unflatten_bucket(flat: torch.Tensor, dtypes: list[torch.dtype], shapes: list[list[int]]) -> list[torch.Tensor]:
    """Views of `flat` (uint8) as the bucket's tensors, in the order flatten_bucket wrote them."""
    out, start = [], 0
    for dtype, shape, n in zip(dtypes, shapes, tensor_bytes(dtypes, shapes)):
        part = flat[start:start + n]
        if start % dtype.itemsize:
            part = part.clone()  # a view needs an offset aligned to the element size
        out.append(part.view(dtype).reshape(shape))
        start += n
    if start != flat.numel():
        raise ValueError(f"a flattened bucket of {flat.numel()} bytes does not match its {len(shapes)} tensors "
                         f"({start} bytes)")
    return out


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")  # SGLang sends "bfloat16", "float32", ...


def dtype_from_name(name: str) -> torch.dtype:
    dtype = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {name!r} in update_weights_from_distributed")
    return dtype


def new_broadcast_group(master_address: str, master_port: int, rank: int, world_size: int,
                        group_name: str, backend: str, timeout_s: float = 120.0):
    """A process group used only for weight sync, outside the default group, built the way SGLang's engines
    join it (`init_custom_process_group` in sglang/srt/utils/common.py, 0.5.16; slime's trainer does the same): a
    TCPStore hosted by rank 0 (the trainer), PrefixStore(group_name), then torch's _new_process_group_helper, which
    adds its own f"{group_name}/" and per-device prefixes. Both sides must build the same key layout: NCCL's
    unique-id exchange goes through these keys, and a trainer that made its ProcessGroupNCCL directly on
    PrefixStore(group_name) waited forever for engines that posted under the longer prefix. The group is
    registered with torch.distributed (ranks = group ranks) so that torch.distributed.broadcast takes it;
    destroy_broadcast_group frees it."""
    import inspect

    from torch import distributed as dist
    from torch.distributed import distributed_c10d as c10d

    timeout = datetime.timedelta(seconds=timeout_s)
    store = dist.TCPStore(master_address, master_port, world_size, is_master=rank == 0,
                          timeout=timeout, wait_for_workers=False)
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"weight-sync backend {backend!r} unknown (gloo on CPU, nccl on GPU)")
    helper = c10d._new_process_group_helper
    options = "backend_options" if "backend_options" in inspect.signature(helper).parameters else "pg_options"
    group, _ = helper(world_size, rank, [], c10d.Backend(backend), c10d.PrefixStore(group_name, store),
                      group_name=group_name, timeout=timeout, **{options: None})
    c10d._world.pg_group_ranks[group] = {i: i for i in range(world_size)}
    return group


def destroy_broadcast_group(group) -> None:
    """Frees a new_broadcast_group (its communicator and its torch.distributed registration)."""
    from torch import distributed as dist

    dist.destroy_process_group(group)


def abort_broadcast_group(group) -> None:
    """Aborts a new_broadcast_group whose collective is stuck (a peer that never joins or never posts its side):
    NCCL's communicator is aborted so that a thread blocked in it returns; best effort (a torch without the call
    leaves that thread blocked, and the caller goes on without it)."""
    from torch.distributed import distributed_c10d as c10d

    try:
        if hasattr(c10d, "_abort_process_group"):
            c10d._abort_process_group(group)
        elif hasattr(group, "abort"):
            group.abort()
    except Exception:  # noqa: BLE001 - nothing else can be done for a stuck group
        pass


def broadcast_tensors(group, tensors: list[torch.Tensor]) -> None:
    """One broadcast per tensor from rank 0, in order (the receive side posts the same list); returns once they
    are sent (on a GPU, NCCL's stream is synchronised: the caller bounds the whole transfer, rollout.engines)."""
    from torch import distributed as dist

    if tensors and tensors[0].is_cuda:
        with torch.cuda.device(tensors[0].device):  # the calling thread may have another current device
            for t in tensors:
                dist.broadcast(t, src=0, group=group)
            torch.cuda.current_stream().synchronize()
        return
    for t in tensors:
        dist.broadcast(t, src=0, group=group)
