"""Learning-rate schedule: hand-computed values for warmup, constant, linear and cosine decay."""
import math

import pytest

from rlrun.train.schedule import lr_at


def test_warmup_is_linear_from_the_first_step():
    # warmup 4: steps 0..3 get 1/4, 2/4, 3/4, 4/4 of lr
    assert [lr_at(s, lr=1.0, min_lr=0.0, style="constant", warmup=4, total=10) for s in range(5)] == [0.25, 0.5, 0.75, 1.0, 1.0]


def test_linear_decays_to_min_lr_over_the_steps_after_warmup():
    kw = dict(lr=1.0, min_lr=0.1, style="linear", warmup=2, total=12)
    assert lr_at(2, **kw) == pytest.approx(1.0)  # decay starts right after warmup
    assert lr_at(7, **kw) == pytest.approx(0.1 + 0.9 * 0.5)  # half way through 10 decay steps
    assert lr_at(12, **kw) == pytest.approx(0.1)
    assert lr_at(50, **kw) == pytest.approx(0.1)  # clamps past the end


def test_cosine_is_half_way_at_the_middle():
    kw = dict(lr=2.0, min_lr=0.0, style="cosine", warmup=0, total=100)
    assert lr_at(0, **kw) == pytest.approx(2.0)
    assert lr_at(50, **kw) == pytest.approx(1.0)
    assert lr_at(25, **kw) == pytest.approx(1.0 + math.cos(math.pi / 4))


def test_unknown_style_names_the_field():
    with pytest.raises(ValueError, match="optim.lr_decay_style='step'"):
        lr_at(0, lr=1.0, min_lr=0.0, style="step", warmup=0, total=1)
