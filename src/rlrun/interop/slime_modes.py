"""slime's flags of the training modes beside RL <-> rlrun (docs/slime.md, docs/algorithms.md).

SFT, as slime's SFT scripts (scripts/run-qwen3-4B-base-sft.sh) spell it:
    --loss-type sft_loss                                    <-> algo.loss_type=sft_loss (a table row)
    --debug-train-only                                      implied: an sft_loss run starts no engines
    --rollout-function-path slime.rollout.sft_rollout.generate_rollout
                                                            implied: sft_loss reads the data rows as samples
                                                            (rlrun.data.sft), assistant turns trained
    --disable-compute-advantages-and-returns                implied: sft_loss computes no advantages
    --loss-mask-type qwen|qwen3|distill_qwen                rlrun cuts the assistant spans with the tokenizer's
                                                            chat template (rlrun.data.sft), for every model
Each of the implied flags is refused without --loss-type sft_loss (what it would do there, rlrun has
elsewhere or not at all: a train-only run over saved rollouts is `rlrun replay`).

On-policy distillation (slime_validate_args: --opd-type is required with --use-opd; --opd-teacher-load is required
with --opd-type megatron and refused with sglang):
    --use-opd --opd-type megatron --opd-teacher-load T      <-> algo.distill.teacher=T (where=trainer); the megatron
                                                            backend reads T as slime does (torch_dist) or as an HF
                                                            dir; the torch backend needs an HF dir
    --opd-kl-coef C                                         <-> algo.distill.coef=C (a table row)
    --use-opd --opd-type sglang --rm-url U                  <-> algo.distill.where=engine, algo.distill.url=U (slime's
                                                            OPD reward function posts each sample's tokens to
                                                            args.rm_url, its teacher server, which the script starts
                                                            itself); slime's pair of OPD functions (reward_func and
                                                            post_process_rewards in slime.rollout.on_policy_distillation,
                                                            OPD_FUNCTIONS) is what rlrun's teacher client does: it
                                                            imports as algo.distill.reward=replace (its rewards are 0)
                                                            and the run's rule rewards are scored for the log only
"""
from __future__ import annotations

SFT_ROLLOUT = "slime.rollout.sft_rollout.generate_rollout"
SFT_LOSS = "sft_loss"
IMPLIED_BY_SFT = {
    "--debug-train-only": "an algo.loss_type=sft_loss run starts no engines",
    "--disable-compute-advantages-and-returns": "algo.loss_type=sft_loss computes no advantages",
    "--loss-mask-type": "rlrun cuts the assistant spans of a conversation with the tokenizer's chat template "
                        "(rlrun.data.sft), whatever the model",
}
WITHOUT_SFT = {
    "--debug-train-only": "slime's train-only run over saved rollouts is `rlrun replay RUN_DIR` (docs/runner.md); "
                          "with --loss-type sft_loss it is implied",
    "--disable-compute-advantages-and-returns": "only a loss that reads no advantages can skip them "
                                                "(--loss-type sft_loss)",
    "--loss-mask-type": "the SFT rollout's mask type; it applies with --loss-type sft_loss only",
    "--rollout-function-path": f"slime's SFT rollout function {SFT_ROLLOUT} is imported with --loss-type sft_loss "
                               "(other rollout functions run through rollout.rollout_fn)",
}
OPD_FLAGS = ("--use-opd", "--opd-type")
OPD_MODULE = "slime.rollout.on_policy_distillation"
# slime's --opd-type sglang plumbing: the teacher's answer as the "reward", its log-probs moved to the sample and 0
# rewards returned; rlrun's served teacher (rlrun.parts.teacher.EngineTeacher) does both
OPD_FUNCTIONS = {"data.rm_type": f"slime:{OPD_MODULE}:reward_func",
                 "algo.reward_post_process": f"slime:{OPD_MODULE}:post_process_rewards"}
FLAGS = (*IMPLIED_BY_SFT, "--rollout-function-path", *OPD_FLAGS)


def decode(dec, occ) -> None:
    """A Decoder's handling of FLAGS (dec: slime_decode._Decoder); checked against --loss-type in finish()."""
    if occ.flag in OPD_FLAGS:
        dec.expect(occ, 0 if occ.flag == "--use-opd" else 1)
        if occ.flag == "--opd-type" and occ.values[0] not in ("megatron", "sglang"):
            dec.unknown.append((occ, f"--opd-type {occ.values[0]}: slime knows megatron and sglang"))
        dec.opd.append(occ)
        return
    if occ.flag == "--rollout-function-path":
        dec.expect(occ, 1)
        if occ.values[0] != SFT_ROLLOUT:  # any other rollout function runs through rlrun.agent.slime_rollout
            from rlrun.interop import slime_agent
            slime_agent.decode_rollout_fn(dec, occ)
            return
    elif occ.flag != "--loss-mask-type":
        dec.expect(occ, 0)
    dec.modes.append(occ)


def finish(dec) -> None:
    """After all flags: the SFT flags are notes with sft_loss, refusals without it; the OPD flags as
    slime_validate_args checks them."""
    _finish_opd(dec)
    sft = dec.values.get("algo.loss_type") == SFT_LOSS
    for occ in dec.modes:
        if not sft:
            dec.unknown.append((occ, WITHOUT_SFT[occ.flag]))
        else:
            why = IMPLIED_BY_SFT.get(occ.flag, "algo.loss_type=sft_loss reads the data rows as samples")
            dec.notes.append(f"{occ.where}: {' '.join((occ.flag, *occ.values))}: no change: {why}")


    if sft and dec.values.get("train.async_train"):  # slime's SFT scripts launch train_async.py
        dec.values["train.async_train"] = False
        dec.notes.append("train_async.py with --loss-type sft_loss --debug-train-only: no rollout to overlap with "
                         "training; imported as train.async_train=false")
    if sft and not dec.values.get("data.apply_chat_template"):  # slime's SFT rollout always renders the template
        dec.set("data.apply_chat_template", True, None)
        dec.notes.append("--loss-type sft_loss: slime's SFT rollout always renders the conversation with the chat "
                         "template (MultiTurnLossMaskGenerator); imported as data.apply_chat_template=true")


def _finish_opd(dec) -> None:
    seen = {o.flag: o for o in dec.opd}
    teacher = dec.values.get("algo.distill.teacher")
    load = dec.seen.get("--opd-teacher-load")
    if "--use-opd" not in seen:
        for occ in [*dec.opd, *([load] if load else [])]:
            dec.unknown.append((occ, "an OPD setting without --use-opd: slime refuses --opd-teacher-load without it "
                                     "(slime_validate_args) and reads --opd-type only with it"))
        if teacher is not None:
            dec.values["algo.distill.teacher"] = None
        return
    kind = seen.get("--opd-type")
    if kind is None:
        dec.unknown.append((seen["--use-opd"], "--use-opd without --opd-type: slime raises ('--opd-type must be "
                                               "specified when --use-opd is enabled', slime_validate_args)"))
    elif kind.values[0] == "megatron" and teacher is None:
        dec.unknown.append((kind, "--opd-type megatron without --opd-teacher-load: slime raises (slime_validate_args)"))
    elif kind.values[0] == "sglang":
        _finish_served(dec, kind, teacher, load)
    elif kind.values[0] == "megatron":
        dec.notes.append(f"{load.where}: --opd-teacher-load {teacher}: imported as algo.distill.teacher (where=trainer); "
                         "the teacher has the student's architecture; the megatron backend reads a torch_dist folder "
                         "or an HF dir, the torch backend an HF dir")


def _finish_served(dec, kind, teacher, load) -> None:
    """--opd-type sglang: the teacher is the server at --rm-url (slime refuses --opd-teacher-load with it)."""
    if teacher is not None:
        dec.unknown.append((load, "--opd-teacher-load with --opd-type sglang: slime raises (slime_validate_args)"))
        return
    url = dec.values.get("data.rm_url")
    if url is None:
        dec.unknown.append((kind, "--opd-type sglang without --rm-url: slime's OPD reward function asks the teacher "
                                  "server at args.rm_url, and the script names none"))
        return
    dec.set("algo.distill.where", "engine", kind)
    dec.set("algo.distill.url", url, kind)
    dec.notes.append(f"{kind.where}: --opd-type sglang: the teacher is the server at --rm-url {url}, imported as "
                     "algo.distill.where=engine, algo.distill.url (the script starts it; `rlrun validate --check-paths` and the run check that "
                     "it answers; or serve a checkpoint with algo.distill.teacher=<HF dir>, algo.distill.url=null)")
    if all(dec.values.get(k) == v for k, v in OPD_FUNCTIONS.items()):
        for key in (*OPD_FUNCTIONS, "data.rm_url"):
            dec.values.pop(key, None)
            dec.explicit.discard(key)
        dec.set("algo.distill.reward", "replace", kind)
        dec.set("data.rm_type", "zero", kind)
        dec.notes.append(f"{kind.where}: {OPD_MODULE}'s reward_func and post_process_rewards (the teacher's "
                         "input_token_logprobs as the samples' teacher log-probs, 0 rewards) are rlrun's served "
                         "teacher: imported as algo.distill.reward=replace, data.rm_type=zero")


def encode(cfg: dict, arrays: dict, comments: dict) -> None:
    """algo.loss_type=sft_loss -> the flags slime's SFT scripts add to --loss-type (its row writes that one);
    algo.distill.teacher -> --use-opd --opd-type megatron (the rows write the teacher and the coefficient)."""
    d = cfg["algo"]["distill"]
    if d["where"] == "engine" and (d["teacher"] is not None or d["url"] is not None):
        _encode_served(d, arrays, comments)
    elif d["teacher"] is not None:
        arrays["GRPO_ARGS"] += [["--use-opd"], ["--opd-type", "megatron"]]
        if d["reward"] == "replace":
            comments["GRPO_ARGS"].append("algo.distill.reward=replace: slime has no flag; its rewards would have to "
                                         "be 0 (a --custom-reward-post-process-path returning 0, as its sglang OPD "
                                         "example does)")
    if cfg["algo"]["loss_type"] == SFT_LOSS:
        arrays["ROLLOUT_ARGS"].append(["--rollout-function-path", SFT_ROLLOUT])
        arrays["GRPO_ARGS"] += [["--disable-compute-advantages-and-returns"], ["--debug-train-only"]]


def _encode_served(d: dict, arrays: dict, comments: dict) -> None:
    """algo.distill.where=engine -> --use-opd --opd-type sglang with slime's OPD functions posting to --rm-url (the
    url, or a server the user starts for algo.distill.teacher: slime places no teacher engine)."""
    arrays["GRPO_ARGS"] = [a for a in arrays["GRPO_ARGS"] if a[0] != "--opd-teacher-load"]  # slime refuses it here
    arrays["GRPO_ARGS"] += [["--use-opd"], ["--opd-type", "sglang"]]
    rm = arrays["ROLLOUT_ARGS"]
    rm[:] = [a for a in rm if a[0] not in ("--rm-url", "--custom-rm-path", "--rm-type",
                                           "--custom-reward-post-process-path")]
    url = d["url"] or "http://TEACHER_HOST:PORT/generate"
    rm += [["--custom-rm-path", f"{OPD_MODULE}.reward_func"],
           ["--custom-reward-post-process-path", f"{OPD_MODULE}.post_process_rewards"], ["--rm-url", url]]
    if d["url"] is None:
        comments["GRPO_ARGS"].append(f"algo.distill.teacher={d['teacher']} served by rlrun's teacher engines: slime "
                                     "places none; start `python -m sglang.launch_server --model-path "
                                     f"{d['teacher']}` and put its /generate URL in --rm-url")
    if d["reward"] == "add":
        comments["GRPO_ARGS"].append("algo.distill.reward=add: slime's OPD post-process returns 0 rewards (replace); "
                                     "adding the rule reward needs a post-process function of your own")
