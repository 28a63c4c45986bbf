"""Checkpoints that do not stop training (checkpoint.async_save): a save is a snapshot, then a write.

The snapshot copies everything the save writes into host memory the trainer no longer touches (device -> host for
GPU tensors, a clone for host tensors: training goes on updating its own in place), synchronously, at the save
point. The write (safetensors, torch.save) runs on one background thread of the trainer's process while the next
steps train; file writes release the GIL. A save starts only after the previous one is written (one snapshot in
host memory at a time).

The commit stays with the driver (rlrun.parts.checkpoints): it writes driver.json and moves `latest` only after
every rank's writer reported its files complete, so a run killed mid-write resumes from the previous complete
checkpoint, as with a blocking save (rlrun.checkpoint).
"""
from __future__ import annotations

import threading
from typing import Any, Callable

import torch


def host_copy(obj: Any) -> Any:
    """obj with every tensor replaced by a host copy of its own (dicts, lists and tuples rebuilt; anything else
    kept as is). Device tensors go through pinned buffers with non-blocking copies, waited for once at the end."""
    cuda = []

    def copy(x: Any) -> Any:
        if torch.is_tensor(x):
            x = x.detach()
            if x.device.type == "cpu":
                return x.clone()
            out = torch.empty(x.shape, dtype=x.dtype, pin_memory=torch.cuda.is_available())
            out.copy_(x, non_blocking=True)
            cuda.append(x.device)
            return out
        if isinstance(x, dict):
            return {k: copy(v) for k, v in x.items()}
        if isinstance(x, list):
            return [copy(v) for v in x]
        if isinstance(x, tuple) and not hasattr(x, "_fields"):
            return tuple(copy(v) for v in x)
        return x

    out = copy(obj)
    for device in set(cuda):
        torch.cuda.synchronize(device)
    return out


class BackgroundWriter:
    """One write at a time on a daemon thread. start(fn) waits for the previous write (raising its error), then
    runs fn() in the background; done() says whether it finished (raising its error once); wait() blocks."""

    def __init__(self, name: str = "checkpoint-writer"):
        self.name = name
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def start(self, fn: Callable[[], None]) -> None:
        self.wait()

        def run() -> None:
            try:
                fn()
            except BaseException as e:  # noqa: BLE001 - handed to the trainer's thread by done()/wait()
                self._error = e

        self._thread = threading.Thread(target=run, name=self.name, daemon=True)
        self._thread.start()

    def done(self) -> bool:
        if self._thread is not None and self._thread.is_alive():
            return False
        self._thread = None
        self._raise()
        return True

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._raise()

    def _raise(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise RuntimeError(f"the background checkpoint write failed: {error!r}") from error
