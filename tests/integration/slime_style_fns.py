"""Generate functions written the way slime's examples write them (this repo's own code, not copies):
GenerateState(args) for the tokenizer, slime's post() to the router, Sample.append_response_tokens
and hand-extended lists, Sample.Status by identity, isinstance(sample, Sample), a list of Samples.
They import from rlrun.agent.slime_compat, which is slime itself when slime is importable."""
import copy

from rlrun.agent.slime_compat import GenerateState, Sample, post

OBSERVATION = "\nuser tool response\n"


def _url(args):
    return f"http://{args.sglang_router_ip}:{args.sglang_router_port}/generate"


def _pairs(output):
    pairs = output["meta_info"]["output_token_logprobs"]
    return [p[1] for p in pairs], [p[0] for p in pairs]


async def tool_loop(args, sample: Sample, sampling_params, evaluation=False) -> Sample:
    """Token in / token out over two model turns with a tool observation between them
    (append_response_tokens with meta_info and text=; the status comes from finish_reason)."""
    assert isinstance(sample, Sample) and sample.status is Sample.Status.PENDING
    sample.metadata["evaluation"] = evaluation
    state = GenerateState(args)
    sample.loss_mask = []
    for turn in range(2):
        params = dict(sampling_params, max_new_tokens=min(sampling_params["max_new_tokens"], 4))
        output = await post(_url(args), {"input_ids": sample.tokens, "sampling_params": params, "return_logprob": True})
        ids, lps = _pairs(output)
        sample.append_response_tokens(args, tokens=ids, log_probs=lps, trainable=True,
                                      meta_info=output["meta_info"], text=output["text"])
        if turn == 0:
            obs = state.tokenizer(OBSERVATION, add_special_tokens=False)["input_ids"]
            sample.append_response_tokens(args, tokens=obs, trainable=False, text=OBSERVATION)
    return sample


async def text_turns(args, sample: Sample, sampling_params) -> Sample:
    """Text in (the engine tokenises), lists extended by hand, the status set by a match at the end."""
    state = GenerateState(args)
    prompt_ids = state.tokenizer(sample.prompt, add_special_tokens=False)["input_ids"]
    sample.tokens, sample.loss_mask, sample.rollout_log_probs = list(prompt_ids), [], []
    response = ""
    for turn in range(2):
        output = await post(_url(args), {"text": sample.prompt + response, "sampling_params": sampling_params,
                                         "return_logprob": True})
        ids, lps = _pairs(output)
        sample.tokens += ids
        sample.loss_mask += [1] * len(ids)
        sample.rollout_log_probs += lps
        response += output["text"]
        if turn == 0:
            obs = state.tokenizer(OBSERVATION, add_special_tokens=False)["input_ids"]
            sample.tokens += obs
            sample.loss_mask += [0] * len(obs)
            sample.rollout_log_probs += [0.0] * len(obs)
            response += OBSERVATION
    sample.response, sample.response_length = response, len(sample.tokens) - len(prompt_ids)
    match output["meta_info"]["finish_reason"]["type"]:
        case "length":
            sample.status = Sample.Status.TRUNCATED
        case "stop":
            sample.status = Sample.Status.COMPLETED
        case "abort":
            sample.status = Sample.Status.ABORTED
    return sample


async def agents(args, sample: Sample, sampling_params, evaluation=False) -> list[Sample]:
    """Three agents answer the same prompt; each answer is its own Sample (slime's multi-agent form).
    Sets attributes on args and deep-copies it, as slime's example does."""
    args.sampling_params, args.evaluation = sampling_params, evaluation
    args = copy.deepcopy(args)
    state = GenerateState(args)
    out = []
    for k in range(3):
        s = copy.deepcopy(sample)
        prompt = f"{sample.prompt} agent {k}"
        s.prompt, s.tokens = prompt, state.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        output = await post(_url(args), {"input_ids": s.tokens, "sampling_params": args.sampling_params,
                                         "return_logprob": True})
        ids, lps = _pairs(output)
        s.append_response_tokens(args, tokens=ids, log_probs=lps, trainable=True, meta_info=output["meta_info"])
        s.response = output["text"]
        s.reward = await reward(args, s)
        out.append(s)
    return out


async def reward(args, sample, **kwargs):
    """slime's custom reward form: (args, sample) -> a number; here the response length as a fraction,
    and -1 for a sample generated for an eval dataset (evaluation=True)."""
    if not isinstance(sample, Sample):
        raise TypeError("Sample must be an instance of Sample class.")
    if sample.metadata.get("evaluation"):
        return -1.0
    return sample.response_length / args.rollout_max_response_len


async def pair(args, sample: Sample, sampling_params) -> list[Sample]:
    """Two answers to the prompt, unscored: data.rm_type=slime:...:batch_reward scores them at once."""
    out = []
    for _ in range(2):
        s = copy.deepcopy(sample)
        output = await post(_url(args), {"input_ids": s.tokens, "sampling_params": sampling_params,
                                         "return_logprob": True})
        ids, lps = _pairs(output)
        s.append_response_tokens(args, tokens=ids, log_probs=lps, trainable=True, meta_info=output["meta_info"],
                                 text=output["text"])
        out.append(s)
    return out


async def batch_reward(args, samples, **kwargs):
    """slime's batched --custom-rm-path form: a list in, one reward per sample out (its index in the batch)."""
    assert isinstance(samples, list) and all(isinstance(s, Sample) for s in samples)
    return [float(i) for i in range(len(samples))]


def rollout(args, rollout_id, data_buffer, evaluation=False):
    """A rollout function written the way slime's are (--rollout-function-path): its own event loop, groups drawn
    from slime's data_buffer (one handed back and drawn again, as slime's fully-async example requeues aborted
    groups), each sample made by tool_loop and scored by reward; returns list[list[Sample]]."""
    import asyncio

    groups = data_buffer.get_samples(args.rollout_batch_size)
    data_buffer.add_samples([groups.pop()])
    groups += data_buffer.get_samples(1)
    params = {"temperature": args.rollout_temperature, "max_new_tokens": args.rollout_max_response_len}

    async def one(s):
        s = await tool_loop(args, s, dict(params))
        s.reward = await reward(args, s)
        return s

    async def all_groups():
        return [list(await asyncio.gather(*(one(s) for s in g))) for g in groups]
    return asyncio.run(all_groups())
