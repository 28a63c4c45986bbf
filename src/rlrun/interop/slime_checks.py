"""What slime, Megatron or SGLang refuse at start-up (or fail on at the first rollout) that an rlrun config
cannot say: a flag slime needs and the script leaves out (rlrun would fill in its group's value), a KL loss
without --ref-load (rlrun would use checkpoint.hf), Megatron's sequence-length asserts on flags rlrun does not
keep. `rlrun import slime` refuses such a script (exit 2, nothing written) with these problems, each on the
rlrun key of the flag to fix (the flag itself where rlrun has no key) and with a fix.

Everything slime checks that an rlrun config can say is an rlrun rule (rlrun.config.rules, layout_rules,
hfcheck) and is reported by validating the imported experiment; docs/slime.md "slime's start-up checks" lists
which is where. A check is a function (Decoded) -> Problems registered with @check (rlrun.config.registry)."""
from __future__ import annotations

from typing import Iterator

from rlrun.config.errors import Problem
from rlrun.config.registry import Checks
from rlrun.interop.slime_agent import GENERATE_FLAG
from rlrun.interop.slime_table import ROWS

CHECKS: Checks = Checks()
check = CHECKS

SEQ_LENGTH_PLACEHOLDER = 4096  # slime's _set_default_megatron_args: `if args.seq_length is None: seq_length = 4096`
# With a custom generate function the function makes the response and may set the reward itself: these flags
# are then its business (slime passes them on as they are).
_FUNCTION_OWNS = frozenset({"data.rm_type", "rollout.max_response_len"})


def run(decoded) -> list[Problem]:
    return CHECKS.run(decoded)


def _seen(decoded, flag: str) -> bool:
    return flag in decoded.seen


@check
def absent_required(decoded) -> Iterator[Problem]:
    """A flag slime has no usable default for (slime_table.Row.required) is not in the script."""
    custom = _seen(decoded, GENERATE_FLAG)
    # --loss-type sft_loss (with --debug-train-only) never generates or scores: the rollout side's flags are moot
    train_only = decoded.values.get("algo.loss_type") == "sft_loss"
    for row in ROWS:
        if train_only and row.path.startswith(("rollout.", "data.rm_")):
            continue
        if row.required and row.path not in decoded.explicit and not (custom and row.path in _FUNCTION_OWNS):
            yield Problem(row.path, f"{row.flag} is not in the script: {row.required}",
                          f"add {row.flag} to the script (rlrun does not fill in its own {row.path} for it)")


@check
def run_length(decoded) -> Iterator[Problem]:
    """slime_validate_args: `assert args.num_rollout is not None` when --num-epoch is not set."""
    if not _seen(decoded, "--num-rollout") and not _seen(decoded, "--num-epoch"):
        yield Problem("rollout.num_rollout", "neither --num-rollout nor --num-epoch is in the script: slime asserts "
                      "'num_epoch is not set, but num_rollout is not set' (slime/utils/arguments.py "
                      "slime_validate_args)", "add --num-rollout N (the number of rollouts to train on)")


@check
def kl_reference(decoded) -> Iterator[Problem]:
    """slime_validate_args: `if args.kl_coef != 0 or args.use_kl_loss: if not os.path.exists(args.ref_load)`,
    a TypeError for ref_load None (os.stat(None)) and a FileNotFoundError for a missing folder. rlrun would
    derive checkpoint.ref from checkpoint.hf instead (rlrun.config.warn.kl_reference_is_the_hf_checkpoint)."""
    v = decoded.values
    kl = [f for f, on in (("--use-kl-loss", v.get("algo.use_kl_loss")), ("--kl-coef", v.get("algo.kl_coef")))
          if on]
    if kl and "checkpoint.ref" not in decoded.explicit:
        yield Problem("checkpoint.ref", f"{' and '.join(kl)} need a reference model and --ref-load is not in the "
                      "script: slime stops in slime_validate_args (slime/utils/arguments.py: `if args.kl_coef != 0 "
                      "or args.use_kl_loss: if not os.path.exists(args.ref_load)`, a TypeError for no --ref-load)",
                      "add --ref-load with the reference checkpoint (Megatron torch_dist of the starting model), or "
                      "drop --use-kl-loss and --kl-coef")


@check
def save_folder(decoded) -> Iterator[Problem]:
    """slime_validate_args: `if args.save_interval is not None: assert args.save is not None`."""
    if _seen(decoded, "--save-interval") and "checkpoint.save" not in decoded.explicit:
        yield Problem("checkpoint.save", "--save-interval without --save: slime asserts \"'--save' is required when "
                      "save_interval is set\" (slime/utils/arguments.py slime_validate_args)",
                      "add --save FOLDER, or drop --save-interval")


@check
def sequence_length(decoded) -> Iterator[Problem]:
    """Megatron's validate_args (megatron/training/arguments.py): `assert args.max_position_embeddings >=
    args.seq_length`, and with context parallelism `seq_length % (2 * context_parallel_size) == 0`. slime fills
    seq_length = 4096 when absent and max_position_embeddings = seq_length when absent
    (slime/backends/megatron_utils/arguments.py _set_default_megatron_args)."""
    seq = decoded.seen.get("--seq-length")
    length = int(seq.values[0]) if seq is not None and len(seq.values) == 1 and seq.values[0].isdigit() \
        else SEQ_LENGTH_PLACEHOLDER
    positions = _positions(decoded)
    if positions is not None and positions < length:
        said = "--seq-length" if seq is not None else "slime's placeholder --seq-length"
        yield Problem("model.max_position_embeddings", f"--max-position-embeddings {positions} is below {said} "
                      f"{length}: Megatron asserts max_position_embeddings >= seq_length (megatron/training/"
                      "arguments.py validate_args)", f"raise --max-position-embeddings to >= {length} (the "
                      "checkpoint's config.json value), or lower --seq-length (slime packs variable lengths: it "
                      "is a placeholder)", positions)
    cp = decoded.values.get("parallelism.cp") or 1
    if cp > 1 and length % (2 * cp):
        yield Problem("parallelism.cp", f"--seq-length {length} is not a multiple of 2 x context parallel {cp}: "
                      "Megatron asserts 'seq-length should be a multiple of 2 * context-parallel-size' "
                      "(megatron/training/arguments.py validate_args)",
                      f"use a --seq-length that is a multiple of {2 * cp} (or drop it: slime's placeholder is "
                      f"{SEQ_LENGTH_PLACEHOLDER})", cp)


@check
def positions_for_a_sample(decoded) -> Iterator[Problem]:
    """A training position limit below the checkpoint's is fine (positions beyond it are not trained on); it is
    refused only where a sample (prompt + response) needs more positions than the script gives. Only an explicit
    --max-position-embeddings counts: --seq-length alone is a placeholder for slime's variable-length packing."""
    positions = _positions(decoded, ("--max-position-embeddings",))
    response = decoded.values.get("rollout.max_response_len")
    if positions is None or not isinstance(response, int) or "rollout.max_response_len" not in decoded.explicit:
        return
    prompt = decoded.values.get("data.max_prompt_len")
    need = response + (prompt if isinstance(prompt, int) else 1)
    what = f"prompt {prompt} + response {response}" if isinstance(prompt, int) else \
        f"response {response} + at least 1 prompt token"
    context = decoded.values.get("rollout.context_length")
    if "rollout.context_length" in decoded.explicit and isinstance(context, int) and context < need:
        # slime's SGLang rollout cuts max_new_tokens to --rollout-max-context-len minus the prompt
        need, what = context, f"--rollout-max-context-len {context}, which cuts prompt + response"
    if need > positions:
        yield Problem("model.max_position_embeddings", f"--max-position-embeddings {positions} trains positions up "
                      f"to {positions}, and a sample needs {need} ({what})",
                      f"raise --max-position-embeddings to >= {need} (at most the checkpoint's config.json value), "
                      "or lower --rollout-max-response-len", positions)


def _positions(decoded, flags=("--max-position-embeddings", "--seq-length")) -> int | None:
    """The training position limit the script gives Megatron: --max-position-embeddings, else --seq-length
    (slime copies it), else None (the checkpoint's, which rlrun's model group holds)."""
    for flag in flags:
        occ = decoded.seen.get(flag)
        if occ is not None and len(occ.values) == 1 and occ.values[0].isdigit():
            return int(occ.values[0])
    return None


@check
def micro_batches_under_dynamic_batching(decoded) -> Iterator[Problem]:
    """Megatron's microbatch calculator asserts global_batch_size % (micro_batch_size x DP) == 0
    (megatron/core/num_microbatches_calculator.py ConstantNumMicroBatchesCalculator), which slime initialises
    with --micro-batch-size even when --use-dynamic-batch-size packs by tokens instead
    (slime/backends/megatron_utils/initialize.py: "We won't use this. initialize to pass some validation"). rlrun's
    rule (rules.micro_batches) checks the micro-batch size only without dynamic batching, where rlrun uses it."""
    v = decoded.values
    try:
        mbs, gbs = v["train.micro_batch_size"], v["train.global_batch_size"]
        dp = v["train.num_nodes"] * v["train.gpus_per_node"] // (
            v["parallelism.tp"] * v["parallelism.pp"] * v["parallelism.cp"])
    except (KeyError, TypeError, ZeroDivisionError):
        return
    if not v.get("train.use_dynamic_batch_size") or not isinstance(gbs, int) or mbs <= 1 or dp < 1:
        return
    if gbs % (mbs * dp):
        yield Problem("train.micro_batch_size", f"--micro-batch-size {mbs} x DP {dp} = {mbs * dp} does not divide "
                      f"--global-batch-size {gbs}: Megatron's microbatch calculator asserts it at start-up even with "
                      "--use-dynamic-batch-size (megatron/core/num_microbatches_calculator.py; slime/backends/"
                      "megatron_utils/initialize.py)", f"drop --micro-batch-size (1) or use one whose product with "
                      f"DP {dp} divides {gbs}", mbs)
