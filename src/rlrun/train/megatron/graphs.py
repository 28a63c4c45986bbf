"""CUDA graphs of one micro-batch's forward + loss + backward (`train.cuda_graphs`).

Without Transformer Engine the megatron backend's step is paced by the host: megatron-core's
per-module Python launches the kernels more slowly than an H100 runs them (docs/benchmarks.md:
the forward+backward call returns only ~5 ms before the GPU finishes it). A CUDA graph replays
the whole micro-batch - every kernel of the forward, the loss, the backward and the main-grad
accumulation - with one launch.

How it is used (MicroBatchGraphs.__call__, once per micro-batch):
- A graph is keyed by the shapes of the micro-batch's input tensors (and the host ints the
  kernels are launched with, e.g. the longest packed sequence). The first micro-batch of a key runs
  eagerly on the capture stream: that is both its real computation and the warm-up a capture
  needs (cuBLAS workspaces, Triton compilation, cuDNN plans). The second is captured, then
  replayed; every later one is only replayed, after its inputs are copied into the graph's
  static input tensors.
- Capture does not run any kernel, so the main grads are untouched by it. Python-side effects
  that happen while capturing (megatron-core's DDP hooks adding param.grad to main_grad, the
  grad-accumulation-fused GEMMs writing main_grad) are recorded as kernels on buffers whose
  addresses never change; their Python bookkeeping is the same every step.
- All graphs share one memory pool: micro-batches run one after another, and each graph frees
  everything but its static outputs before it ends.
- A capture that fails (an op that syncs with the host, a non-capturable kernel) is logged and
  counted, and that micro-batch and every later one run eagerly: the step is the same, only slower.

Shapes in an RL step change from micro-batch to micro-batch (packed response lengths): the
backend pads each micro-batch to one of a few shapes first (rlrun.train.megatron.packing.bucket:
rows to multiples of max_tokens_per_gpu / 8, sample counts to powers of 2), so graphs replay
across micro-batches and steps; a new shape costs one eager run, as without graphs.
"""
from __future__ import annotations

import logging
import traceback
from collections import OrderedDict
from typing import Callable

import torch

log = logging.getLogger(__name__)


def shape_key(inputs: dict[str, torch.Tensor], *host_ints: int) -> tuple:
    return tuple((k, tuple(v.shape), v.dtype) for k, v in sorted(inputs.items())) + tuple(host_ints)


class MicroBatchGraphs:
    """fn(inputs: dict[str, Tensor], *host_args) -> dict[str, Tensor] (device tensors; fn runs the
    backward itself), run eagerly or through CUDA graphs keyed by shapes and host_args."""

    def __init__(self, fn: Callable[[dict], dict], device, max_graphs: int = 8, on_fallback=None):
        self.fn, self.device, self.max_graphs = fn, device, max_graphs
        self.stream = torch.cuda.Stream(device)
        self.graphs: OrderedDict = OrderedDict()  # key -> (static inputs, static outputs, graph)
        self.seen: set = set()
        self.pool = None
        self.disabled: str | None = None  # why graphs stopped being used (a failed capture)
        self.captures = self.replays = self.eager = 0
        self.on_fallback = on_fallback  # called with the reason once, after a failed capture

    def __enter__(self):
        """Run the micro-batches on the capture stream (warm-up, capture and replay must share it)."""
        self.stream.wait_stream(torch.cuda.current_stream(self.device))
        self._ctx = torch.cuda.stream(self.stream)
        self._ctx.__enter__()
        return self

    def __exit__(self, *exc):
        self._ctx.__exit__(*exc)
        torch.cuda.current_stream(self.device).wait_stream(self.stream)
        return False

    def __call__(self, inputs: dict[str, torch.Tensor], *host_args) -> dict[str, torch.Tensor]:
        """fn(inputs, *host_args); host_args (ints the kernels are launched with) are part of the key."""
        key = shape_key(inputs, *host_args)
        entry = self.graphs.get(key)
        if entry is None:
            if self.disabled is None and key in self.seen:  # the shape's second micro-batch
                entry = self._capture(key, inputs, host_args)
            self.seen.add(key)
            if entry is None:  # its first (the warm-up), or graphs are off after a failed capture
                self.eager += 1
                return self.fn(inputs, *host_args)
        self.graphs.move_to_end(key)
        static_in, static_out, graph = entry
        for k, v in inputs.items():
            static_in[k].copy_(v, non_blocking=True)
        graph.replay()
        self.replays += 1
        # Copies: the next replay of this graph overwrites its static outputs.
        return {k: v.clone() for k, v in static_out.items()}

    def _capture(self, key, inputs, host_args):
        static_in = {k: v.clone() for k, v in inputs.items()}
        graph = torch.cuda.CUDAGraph()
        first: list[BaseException] = []  # the op that broke the capture; ending it raises a vaguer error

        def run():
            try:
                return self.fn(static_in, *host_args)
            except Exception as e:
                first.append(e)
                raise
        try:
            with torch.cuda.graph(graph, pool=self.pool, stream=self.stream):
                static_out = run()
        except RuntimeError as e:
            root = first[0] if first else e
            where = "".join(traceback.format_exception(root)[-4:-1]).strip().replace("\n", " | ")
            self.disabled = f"{type(root).__name__}: {str(root).splitlines()[0][:300]} (at {where[-400:]})"
            log.warning("train.cuda_graphs: capturing a micro-batch failed, running eagerly from now on: %s",
                        self.disabled)
            if self.on_fallback is not None:
                self.on_fallback(self.disabled)
            return None
        if self.pool is None:
            self.pool = graph.pool()
        self.captures += 1
        self.graphs[key] = (static_in, static_out, graph)
        while len(self.graphs) > self.max_graphs:
            self.graphs.popitem(last=False)
        return self.graphs[key]

    def reset(self) -> None:
        """Forget every graph: the buffers they read and write (parameters, main grads) are about to
        move (train.offload frees and re-allocates them), and a replay would use the old addresses."""
        self.graphs.clear()
        self.seen.clear()
        self.pool = None

    def stats(self) -> dict[str, float]:
        """Running counts for the step metrics; fallback 1 once a capture failed (the reason is logged)."""
        return {"train/cuda_graph_replays": float(self.replays), "train/cuda_graph_captures": float(self.captures),
                "train/cuda_graph_eager": float(self.eager), "train/cuda_graph_fallback": float(self.disabled is not None)}
