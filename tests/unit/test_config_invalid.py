"""The catalogue of invalid configs (invalid_configs/catalogue.yaml): every entry fails with the expected
dotted paths, and every problem names a path, says what is wrong and how to fix it."""
from pathlib import Path

import pytest
import yaml

from rlrun.config import ConfigError, load

CATALOGUE = yaml.safe_load((Path(__file__).parent / "invalid_configs" / "catalogue.yaml").read_text())


def test_catalogue_is_large_enough():
    assert len(CATALOGUE) >= 40


@pytest.mark.parametrize("case", sorted(CATALOGUE))
def test_invalid_config_reports_expected_paths(case):
    overrides, expected = CATALOGUE[case]
    with pytest.raises(ConfigError) as err:
        load(overrides)
    problems = err.value.problems
    assert set(expected) <= {p.path for p in problems}, err.value.render()
    for p in problems:
        assert p.message and p.fix, p


def test_an_underivable_batch_identity_is_reported_once():
    # gbs 48 does not divide 16 * 8 = 128 samples: num_steps_per_rollout stays null, and that null must
    # not come back as a second, type-level problem on train.num_steps_per_rollout
    with pytest.raises(ConfigError) as err:
        load(["hardware=h100", "train.global_batch_size=48", "train.num_steps_per_rollout=null"])
    assert [p.path for p in err.value.problems] == ["train.global_batch_size"], err.value.render()
