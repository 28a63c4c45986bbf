"""The seed recipe (conf/experiment/qwen3-4b-grpo-mi300x.yaml) is slime's own script for it, value for value.

tests/data/slime/run-qwen3-4B-mi300x.sh holds the flags of slime's scripts/run-qwen3-4B-amd.sh at commit 624b824
(https://github.com/THUDM/slime; `rlrun import slime` of the two gives the same experiment): its import, through
the real CLI, resolves to the same RunConfig as the shipped recipe, the flags that script leaves out included
(they take slime's defaults: --sglang-server-concurrency 512, --sglang-router-request-timeout-secs 14400,
sglang-router's --request-timeout-secs 1800). Then `rlrun export slime` of the recipe writes slime's values.
"""
import io
from pathlib import Path

from rlrun.config import load
from rlrun.interop.slime import cli_main
from rlrun.interop.slime_decode import flag_set
from rlrun.interop.bash_script import read_script

SEED_SCRIPT = Path(__file__).resolve().parents[1] / "data" / "slime" / "run-qwen3-4B-mi300x.sh"

# Settings slime has no flag for, which the import fills in from what the script does not say: not values of
# the recipe. wandb: slime without --use-wandb logs nothing (the import: disabled); rlrun's default keeps an
# offline log. memory_fit: the script names no GPU, so the import only warns on memory; the recipe names MI300X.
NOT_SLIMES = {"logging.wandb.mode", "checks.memory_fit"}


def _leaves(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(_leaves(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def test_seed_recipe_equals_the_import_of_slimes_script(tmp_path):
    conf = tmp_path / "conf"
    err = io.StringIO()
    rc = cli_main(["import", "slime", str(SEED_SCRIPT), "--out", str(conf / "experiment" / "slime-seed.yaml")],
                  io.StringIO(), err)
    assert rc == 0, err.getvalue()
    imported = _leaves(load(["experiment=slime-seed"], config_dir=conf).model_dump(mode="python"))
    recipe = _leaves(load(["experiment=qwen3-4b-grpo-mi300x"]).model_dump(mode="python"))
    assert set(imported) == set(recipe)
    drift = {k: (recipe[k], imported[k]) for k in recipe if k not in NOT_SLIMES and recipe[k] != imported[k]}
    assert drift == {}, "the seed recipe differs from slime's script (recipe, slime): " + repr(drift)
    # the values the script leaves out are slime's defaults, and the recipe has them
    assert (recipe["rollout.max_concurrency"], recipe["rollout.request_timeout_s"],
            recipe["rollout.router.request_timeout_s"]) == (512, 14400.0, 1800.0)
    assert (recipe["rollout.temperature"], recipe["eval.top_p"]) == (1.0, 1.0)


def test_export_of_the_seed_recipe_writes_slimes_values(tmp_path):
    out, err = io.StringIO(), io.StringIO()
    assert cli_main(["export", "slime", "experiment=qwen3-4b-grpo-mi300x"], out, err) == 0, err.getvalue()
    text = out.getvalue()
    exported = tmp_path / "exported.sh"
    exported.write_text(text)
    launch, theirs = read_script(exported).launch, read_script(SEED_SCRIPT).launch
    # flag_set drops a flag whose value is slime's default: what remains must be the script's, value for value
    extra = flag_set(launch.args, launch.entry) - flag_set(theirs.args, theirs.entry)
    assert {f for f, _ in extra} <= {"--max-position-embeddings", "--use-wandb", "--wandb-mode", "--wandb-project"}
    for flag in ("--sglang-server-concurrency", "--sglang-router-request-timeout-secs", "--router-request-timeout-secs"):
        assert flag not in text  # slime's default, as in its script
    assert "--rollout-temperature 1.0" in text or "--rollout-temperature 1 " in text
