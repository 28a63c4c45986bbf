"""slime's multi-turn flags <-> rlrun (docs/agents.md, docs/slime.md).

--custom-generate-function-path a.b.generate   <-> rollout.generate_fn=slime:a.b:generate
    slime imports the dotted path (its load_function splits at the last dot); rlrun runs the function
    through rlrun.agent.slime_adapter. rlrun's own generate functions and Environment classes take a
    handle, not slime's args, so they are not exported (a comment says so); nor is a file path.
--custom-rm-path a.b.reward_func              <-> data.rm_type=slime:a.b:reward_func
    slime's `async def custom_rm(args, sample)` runs unchanged through rlrun.agent.slime_adapter (the reward
    of a slime generate function's samples, slime's generate_and_rm); it beats --rm-type, as in slime's
    rm_hub.async_rm. Without a slime generate function rlrun has no slime args/Sample to call it with:
    `rlrun validate` refuses that (rlrun.agent.rules).
--custom-reward-post-process-path a.b.f      <-> algo.reward_post_process=slime:a.b:f
    slime's `post_process_rewards(args, samples) -> (raw_rewards, rewards)` runs unchanged on each rollout's
    trained samples (rlrun.agent.slime_rollout.SlimeRewardPostProcess); its rewards replace the group
    normalisation, as in slime's RolloutManager.
--data-source-path, --buffer-filter-path
    slime's signatures (DataSource(args); filter(args, rollout_id, buffer, n)) differ from rlrun's data
    sources (prompts, n), so an import reports them (with the rlrun setting to port them to) instead of
    mapping them silently.
"""
from __future__ import annotations

from rlrun.agent.slime_adapter import PREFIX

GENERATE_FLAG = "--custom-generate-function-path"
SLIME_DEFAULT_SOURCE = "slime.rollout.data_source.RolloutDataSourceWithBuffer"
RM_FLAG = "--custom-rm-path"
ROLLOUT_FLAG = "--rollout-function-path"
POST_PROCESS_FLAG = "--custom-reward-post-process-path"
PORT = {
    "--data-source-path": "slime's DataSource(args) classes do not run in rlrun; port it to data.source, a "
                          "subclass of rlrun.agent.source.DataSource / BufferedDataSource (docs/agents.md)",
    "--buffer-filter-path": "set buffer_filter(buffer, n) on a BufferedDataSource subclass named by data.source "
                            "(docs/agents.md)",
}
FLAGS = (GENERATE_FLAG, RM_FLAG, POST_PROCESS_FLAG, *PORT)  # ROLLOUT_FLAG: slime_modes (SFT's rollout) calls decode_rollout_fn
# slime's default rollout function (slime/utils/arguments.py --rollout-function-path): rlrun's own rollout
SLIME_DEFAULT_ROLLOUT = "slime.rollout.sglang_rollout.generate_rollout"


def to_rlrun(dotted: str) -> str:
    module, _, attr = dotted.rpartition(".")
    if not module:
        raise ValueError(f"{GENERATE_FLAG} {dotted!r} is not a dotted module.function path")
    return f"{PREFIX}{module}:{attr}"


def to_slime(spec: str | None) -> tuple[str | None, str | None]:
    """rollout.generate_fn -> (slime's dotted path or None, a comment or None)."""
    if spec is None:
        return None, None
    target = spec[len(PREFIX):] if spec.startswith(PREFIX) else None
    module, _, attr = (target or "").rpartition(":")
    if target is None or module.endswith(".py") or not module:
        return None, (f"rollout.generate_fn={spec}: not exported; slime runs only its own form, an importable "
                      f"`async def generate(args, sample, sampling_params)` ({GENERATE_FLAG} module.function)")
    return f"{module}.{attr}", None


def decode(dec, occ) -> None:
    """A Decoder's handling of FLAGS (dec: slime_decode.Decoder)."""
    dec.expect(occ, 1)
    value = occ.values[0]
    if occ.flag == GENERATE_FLAG:
        dec.set("rollout.generate_fn", to_rlrun(value), occ)
    elif occ.flag == RM_FLAG:
        dec.custom_rm = (to_rlrun(value), occ)  # applied after every flag: it beats --rm-type wherever that is
    elif occ.flag == POST_PROCESS_FLAG:
        dec.set("algo.reward_post_process", to_rlrun(value), occ)
    elif not (occ.flag == "--data-source-path" and value == SLIME_DEFAULT_SOURCE):
        dec.unknown.append((occ, PORT[occ.flag]))


def decode_rollout_fn(dec, occ) -> None:
    """--rollout-function-path a.b.f (not slime's SFT rollout: slime_modes) -> rollout.rollout_fn=slime:a.b:f;
    slime's default rollout function is rlrun's own rollout (null)."""
    if occ.values[0] != SLIME_DEFAULT_ROLLOUT:
        dec.set("rollout.rollout_fn", to_rlrun(occ.values[0]), occ)


def _function_flag(arrays: dict, comments: dict, setting: str, value: str, flag: str, what: str) -> None:
    """A function setting -> slime's `flag module.function`, or a comment where it has no dotted path."""
    dotted, _ = to_slime(value)
    if dotted:
        arrays["ROLLOUT_ARGS"].append([flag, dotted])
    else:
        comments["ROLLOUT_ARGS"].append(f"{setting}: not exported; slime imports {what} by its dotted path only "
                                        f"({flag} module.function)")


def encode(cfg: dict, arrays: dict, comments: dict) -> None:
    rm = cfg["data"]["rm_type"]
    if rm.startswith(PREFIX):
        _function_flag(arrays, comments, f"data.rm_type={rm}", rm, RM_FLAG, "a reward function")
    post = cfg["algo"].get("reward_post_process")
    if post:
        _function_flag(arrays, comments, f"algo.reward_post_process={post}", post, POST_PROCESS_FLAG, "it")
    if cfg["rollout"].get("rollout_fn"):
        ro_dotted, ro_comment = to_slime(cfg["rollout"]["rollout_fn"])
        if ro_dotted:
            arrays["ROLLOUT_ARGS"].append([ROLLOUT_FLAG, ro_dotted])
    dotted, comment = to_slime(cfg["rollout"]["generate_fn"])
    if dotted:
        arrays["ROLLOUT_ARGS"].append([GENERATE_FLAG, dotted])
    if comment:
        comments["ROLLOUT_ARGS"].append(comment)
    if cfg["data"]["source"]:
        comments["ROLLOUT_ARGS"].append(f"data.source={cfg['data']['source']}: not exported; " + PORT["--data-source-path"])
    if (cfg.get("reward") or {}).get("model", {}).get("checkpoint"):
        comments["ROLLOUT_ARGS"].append("reward.model: not exported; slime starts no reward engines (serve the reward "
                                        "model yourself and point --rm-type remote_rm --rm-url at it)")
