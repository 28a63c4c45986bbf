"""Name lists the config layer needs from packages above it are generated from their one definition, not
copied: src/rlrun/config/names.py holds exactly what `python -m rlrun.reward.names` prints."""
from pathlib import Path

import rlrun.config.names as names
from rlrun.reward.names import names_module
from rlrun.reward.rules import ENGINE_TYPES, REMOTE_TYPES, RULES


def test_config_names_are_generated_from_the_reward_registry():
    assert Path(names.__file__).read_text() == names_module(), \
        "src/rlrun/config/names.py is stale: python -m rlrun.reward.names > src/rlrun/config/names.py"
    assert names.RM_TYPES == (*RULES, *REMOTE_TYPES, *ENGINE_TYPES) and names.REMOTE_TYPES == ("remote", "remote_rm")
    assert names.ENGINE_TYPES == ("reward_model",)
