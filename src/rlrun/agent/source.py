"""data.source: where a rollout's sample groups come from (slime's RolloutDataSource semantics).

    class DataSource:                 sample(n) -> n groups of rollout.n_samples_per_prompt Samples
                                      add_samples(groups): groups generated but not trained on
    class BufferedDataSource:         add_samples keeps them; sample(n) hands buffered groups out
                                      first, chosen by buffer_filter (slime's
                                      RolloutDataSourceWithBuffer with --buffer-filter-path)

``data.source=module:Class`` or ``path/to/file.py:Class`` names a subclass; it is built as
``Class(prompts, n_samples_per_prompt)`` over the run's prompt dataset (data.prompt_data).
The runner calls ``add_samples`` with the groups of a rollout that passed the dynamic-sampling
filter but were not trained on (the over-sampling surplus beyond rollout_batch_size; slime's buffer
gets a partial rollout's leftovers). A buffered group comes back as it was: samples that are no
longer PENDING are not generated again, and samples with a reward are not scored again (off-policy
reuse; their token_versions say which policy made them). The rollout's metrics count them in
``rollout/reused_samples``.
"""
from __future__ import annotations

from typing import Callable

from rlrun.data.groups import make_group
from rlrun.data.sample import Sample

Groups = list[list[Sample]]


def pop_first(buffer: Groups, n: int) -> Groups:
    """The default buffer_filter: the oldest n groups (FIFO), removed from the buffer."""
    out = buffer[:n]
    del buffer[:n]
    return out


class DataSource:
    """Fresh groups from the prompt dataset; add_samples drops what it is given."""

    def __init__(self, prompts, n_samples_per_prompt: int):
        self.prompts = prompts
        self.n = n_samples_per_prompt
        self._next_group = 0

    def sample(self, n: int) -> Groups:
        groups = [make_group(item, self.n, self._next_group + i) for i, item in enumerate(self.prompts.next_batch(n))]
        self._next_group += len(groups)
        return groups

    def add_samples(self, groups: Groups) -> None:
        """Groups generated but not trained on; the plain source does not reuse them."""

    def state_dict(self) -> dict:
        return self.prompts.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.prompts.load_state_dict(state)

    @property
    def epoch(self) -> int:
        return self.prompts.epoch


class BufferedDataSource(DataSource):
    """Groups given to add_samples are handed out again, before fresh prompts, by buffer_filter."""

    buffer_filter: Callable[[Groups, int], Groups] = staticmethod(pop_first)

    def __init__(self, prompts, n_samples_per_prompt: int):
        super().__init__(prompts, n_samples_per_prompt)
        self.buffer: Groups = []

    def sample(self, n: int) -> Groups:
        reused = self.buffer_filter(self.buffer, n) if self.buffer else []
        return reused + (super().sample(n - len(reused)) if n > len(reused) else [])

    def add_samples(self, groups: Groups) -> None:
        for g in groups:
            if len(g) != self.n:
                raise ValueError(f"add_samples got a group of {len(g)} samples; groups have "
                                 f"rollout.n_samples_per_prompt={self.n}")
        self.buffer.extend(groups)


def check_source_class(obj) -> str | None:
    """None when `obj` can serve as data.source, else what is wrong."""
    if not isinstance(obj, type):
        return f"{obj!r} is not a class"
    missing = [m for m in ("sample", "add_samples", "state_dict", "load_state_dict") if not callable(getattr(obj, m, None))]
    if missing:
        return (f"{obj.__name__} has no {', '.join(missing)}; subclass rlrun.agent.source.DataSource "
                "or BufferedDataSource")
    return None
