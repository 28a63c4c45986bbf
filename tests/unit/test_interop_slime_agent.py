"""slime's multi-turn flags: --custom-generate-function-path round-trips; reward/data-source paths are reported."""
from rlrun.config import load
from rlrun.interop.slime_decode import decode, parse_args
from rlrun.interop.slime_encode import encode


def test_custom_generate_function_path_maps_to_the_slime_adapter_and_back():
    d = decode(parse_args("--rollout-batch-size 2 --custom-generate-function-path examples.retool.gen.generate".split()))
    assert d.values["rollout.generate_fn"] == "slime:examples.retool.gen:generate" and d.unknown == []
    enc = encode(load(["rollout.generate_fn=slime:rlrun.rollout.generate_api:single_turn"]).model_dump(mode="python"))
    assert ["--custom-generate-function-path", "rlrun.rollout.generate_api.single_turn"] in enc.arrays["ROLLOUT_ARGS"]


def test_rlrun_only_generate_functions_and_sources_are_comments_not_flags():
    cfg = load(["rollout.generate_fn=examples/tiny_tool/lookup_env.py:LookupEnv", "rollout.max_turns=2",
                "data.source=rlrun.agent.source:BufferedDataSource"]).model_dump(mode="python")
    enc = encode(cfg)
    flat = [f for a in enc.arrays.values() for t in a for f in t]
    assert "--custom-generate-function-path" not in flat and "--data-source-path" not in flat
    notes = " ".join(enc.comments["ROLLOUT_ARGS"])
    assert "rollout.generate_fn=examples/tiny_tool/lookup_env.py:LookupEnv: not exported" in notes
    assert "data.source=rlrun.agent.source:BufferedDataSource: not exported" in notes


def test_slime_data_source_paths_are_reported_with_what_to_port_them_to_and_the_reward_runs():
    d = decode(parse_args(("--custom-rm-path gen.reward_func --data-source-path my.Source --buffer-filter-path my.f "
                           "--data-source-path slime.rollout.data_source.RolloutDataSourceWithBuffer "
                           "--rollout-function-path slime.rollout.fully_async_rollout.generate_rollout_fully_async "
                           "--rollout-function-path slime.rollout.sglang_rollout.generate_rollout").split()))
    why = {o.flag: w for o, w in d.unknown}
    assert d.values["data.rm_type"] == "slime:gen:reward_func"  # runs through the slime adapter
    assert "rlrun.agent.source.DataSource" in why["--data-source-path"]
    assert "buffer_filter" in why["--buffer-filter-path"]
    assert len(d.unknown) == 2  # slime's own default data source is what rlrun does: nothing to report
    # slime's default rollout function is rlrun's own rollout: the first one stays
    assert d.values["rollout.rollout_fn"] == "slime:slime.rollout.fully_async_rollout:generate_rollout_fully_async"


# ---------------------------------------------------------------- the adapter (rlrun.agent.slime_adapter)
import argparse  # noqa: E402
import asyncio  # noqa: E402
import os  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import pytest  # noqa: E402

from rlrun.agent import slime_compat  # noqa: E402
from rlrun.agent.slime_adapter import ARGS, dotted_path, from_slime, slime_args, slime_generate  # noqa: E402
from rlrun.agent.slime_compat import _GenerateState, _Sample  # noqa: E402
from rlrun.data.sample import Sample, Status  # noqa: E402
from rlrun.rollout.client import Sampling  # noqa: E402

# what slime's GenerateState(args), generate(), init_http_client/post and the examples (search-r1,
# retool, multi_agent, strands) read from args (slime/rollout/sglang_rollout.py, slime/utils/http_utils.py,
# examples/*/ at the commit in docs/agents.md), written out here by hand
SLIME_READS = ["ci_test", "hf_checkpoint", "n_samples_per_prompt", "rollout_max_response_len", "rollout_seed",
               "rollout_skip_special_tokens", "rollout_stop", "rollout_stop_token_ids", "rollout_temperature",
               "rollout_top_k", "rollout_top_p", "sglang_dp_size", "sglang_router_ip", "sglang_router_port",
               "sglang_server_concurrency", "use_rollout_routing_replay", "use_distributed_post", "partial_rollout",
               "rollout_max_context_len", "eval_max_context_len", "context_parallel_size", "max_tokens_per_gpu",
               "custom_rm_path", "rm_type", "reward_key", "group_rm", "num_gpus_per_node", "apply_chat_template",
               "mask_offpolicy_in_partial_rollout", "custom_generate_function_path", "rollout_num_engines"]


def handle(url="http://127.0.0.1:30123", **kw):
    """The three things the adapter reads from the runner's ClientHandle (client url, model dir, limits)."""
    base = dict(client=SimpleNamespace(url=url), model_path="/models/m", max_response_len=96, context_length=512,
                max_turns=3, seed=7)
    return SimpleNamespace(**{**base, **kw})


def test_slime_args_come_from_the_run_config_and_cover_what_slime_reads():
    cfg = load(["rollout.temperature=0.7", "rollout.top_p=0.9", "rollout.top_k=20", "rollout.max_concurrency=10",
                "rollout.n_samples_per_prompt=4", "rollout.stop=['</answer>']", "run.seed=3", "data.rm_type=math"])
    args = slime_args(cfg, handle(), "examples.retool.generate_with_retool.generate")
    assert set(SLIME_READS) <= set(vars(args)) and set(vars(args)) == set(ARGS)
    assert (args.sglang_router_ip, args.sglang_router_port, args.hf_checkpoint) == ("127.0.0.1", 30123, "/models/m")
    assert (args.rollout_temperature, args.rollout_top_p, args.rollout_top_k) == (0.7, 0.9, 20)
    assert (args.rollout_max_response_len, args.rollout_max_context_len, args.max_turns) == (96, 512, 3)
    assert args.rollout_stop == ["</answer>"] and args.rollout_seed == 3 and args.n_samples_per_prompt == 4
    engines = cfg.rollout.num_engines
    assert args.rollout_num_engines == engines and args.sglang_server_concurrency == -(-10 // engines)
    assert args.sglang_dp_size is None and args.partial_rollout is False and args.rm_type == "math"
    assert args.custom_generate_function_path == "examples.retool.generate_with_retool.generate"
    assert slime_args(load(["data.rm_type=my.mod:fn"]), handle()).rm_type is None


def test_dotted_path_is_slimes_form():
    assert dotted_path("slime:examples.retool.gen:generate") == "examples.retool.gen.generate"
    assert dotted_path("slime:x/y/gen.py:generate") == "x/y/gen.py:generate"


def meta(finish, version="3"):
    return {"finish_reason": {"type": finish}, "weight_version": version}


def test_stand_in_sample_appends_as_slime_does():
    s = _Sample(prompt="p", tokens=[5, 6])
    kept = s.loss_mask = []  # ReTool keeps this list and assigns it back at the end: extended in place
    s.append_response_tokens(None, tokens=[1, 2], log_probs=[-0.5, -0.25], trainable=True, meta_info=meta("stop"),
                             text="ab")
    s.append_response_tokens(None, tokens=[9], trainable=False, text="!")
    assert kept is s.loss_mask and kept == [1, 1, 0]
    assert s.tokens == [5, 6, 1, 2, 9] and s.response_length == 3 and s.response == "ab!"
    assert s.rollout_log_probs == [-0.5, -0.25, 0.0] and s.weight_versions == ["3"]
    assert s.status is _Sample.Status.COMPLETED
    s.append_response_tokens(None, tokens=[4], log_probs=[-1.0], meta_info=meta("length", "4"))
    assert s.status is _Sample.Status.TRUNCATED and s.weight_versions == ["3", "4"] and s.loss_mask == [1, 1, 0, 1]
    with pytest.raises(ValueError, match="require rollout log probabilities"):
        s.append_response_tokens(None, tokens=[1], trainable=True)
    with pytest.raises(ValueError, match="should not pass rollout log probabilities"):
        s.append_response_tokens(None, tokens=[1], log_probs=[-1.0], trainable=False)
    with pytest.raises(ValueError, match="top-p token replay"):
        s.append_response_tokens(None, tokens=[1], log_probs=[-1.0], meta_info={"top_p_token_ids": [1]})
    fresh = _Sample(tokens=[5])  # a response made before log-probs were recorded: mask and log-probs padded
    fresh.tokens, fresh.response_length = [5, 8], 1
    fresh.append_response_tokens(None, tokens=[3], trainable=False)
    assert fresh.loss_mask == [1, 0] and fresh.rollout_log_probs == [0.0, 0.0]


def test_results_come_back_as_rlrun_samples():
    out = _Sample(prompt="q", tokens=[5, 6, 1, 2, 9], response_length=3, loss_mask=[1, 1, 0],
                  rollout_log_probs=[-0.5, -0.25, 0.0], weight_versions=["2"], reward={"score": 0.5},
                  status=_Sample.Status.TRUNCATED, response="ab!")
    s = from_slime(out, Sample(prompt="q", prompt_tokens=[5, 6]))
    assert (s.prompt_tokens, s.response_tokens, s.loss_mask) == ([5, 6], [1, 2, 9], [1, 1, 0])
    assert s.status is Status.TRUNCATED and s.reward == 0.5 and s.weight_version == 2
    assert s.token_versions == [2, 2, None] and s.rollout_logprobs == [-0.5, -0.25, 0.0]
    out.loss_mask = [1, 1]
    with pytest.raises(ValueError, match="3 response tokens but 2 loss-mask entries"):
        from_slime(out, Sample(prompt="q"))


def test_the_adapter_passes_evaluation_copies_args_and_returns_lists():
    seen = []

    async def fan_out(args, sample, sampling_params, evaluation=True):
        seen.append((args, evaluation, sampling_params))
        args.tokenizer = "set by the function"  # slime's multi-agent example does this
        outs = []
        for k in range(2):
            s = type(sample)(prompt=sample.prompt, tokens=list(sample.tokens), group_index=sample.group_index)
            s.append_response_tokens(args, tokens=[10 + k], log_probs=[-1.0], meta_info=meta("stop"))
            outs.append(s)
        return outs

    fn = slime_generate(fan_out, load([]), "m.fan_out")
    prompt = Sample(prompt="p", prompt_tokens=[1, 2], group_id=4)
    out = asyncio.run(fn(handle(), prompt, Sampling(max_new_tokens=8)))
    asyncio.run(fn(handle(), Sample(prompt="p", prompt_tokens=[1]), Sampling(max_new_tokens=8)))
    assert [o.response_tokens for o in out] == [[10], [11]] and out[0] is prompt
    assert [o.group_id for o in out] == [4, 4] and all(o.status is Status.COMPLETED for o in out)
    asyncio.run(fn.for_evaluation(handle(), Sample(prompt="p", prompt_tokens=[1]), Sampling(max_new_tokens=8)))
    (a1, ev, params), (a2, ev2, _), (_, ev3, _) = seen
    assert (ev, ev2, ev3) == (False, False, True)  # for_evaluation: eval datasets (RolloutSide.generate)
    assert params["sampling_seed"] == 7 and params["max_new_tokens"] == 8
    assert a1 is not a2 and a1.tokenizer == "set by the function"


def test_stand_in_generate_state_builds_slimes_sampling_dict(tmp_path):
    from rlrun.rollout.tiny_model import save_tiny_model

    save_tiny_model(tmp_path)
    args = slime_args(load(["rollout.temperature=0.6", "rollout.top_k=5"]), handle(model_path=str(tmp_path)))
    _GenerateState.clear_instances()
    try:
        state = _GenerateState(args)
        assert _GenerateState(argparse.Namespace()) is state  # one per process, as slime's SingletonMeta
        assert state.sampling_params == dict(temperature=0.6, top_p=1.0, top_k=5, max_new_tokens=96, stop=None,
                                             stop_token_ids=None, skip_special_tokens=False, no_stop_trim=True,
                                             spaces_between_special_tokens=False)
        assert state.tokenizer("a b")["input_ids"] and state.dp_counts == [0]
    finally:
        _GenerateState.clear_instances()


@pytest.mark.skipif(not os.environ.get("RLRUN_SLIME_DIR"), reason="RLRUN_SLIME_DIR (a slime checkout) is not set")
def test_stand_in_sample_matches_slimes_own_on_the_same_calls():
    from slime.utils.types import Sample as SlimeSample

    def drive(cls):
        s = cls(prompt="p", tokens=[5, 6])
        s.loss_mask = []
        s.append_response_tokens(None, tokens=[1, 2], log_probs=[-0.5, -0.25], meta_info=meta("stop"), text="ab")
        s.append_response_tokens(None, tokens=[9, 9], trainable=False, text="!")
        s.append_response_tokens(None, tokens=[4], log_probs=[-1.0], meta_info=meta("length", "4"))
        return (s.tokens, s.loss_mask, s.rollout_log_probs, s.response, s.response_length, s.weight_versions,
                s.status.value, s.effective_response_length)

    assert drive(_Sample) == drive(SlimeSample)
    assert {f for f in _Sample.__dataclass_fields__} <= set(SlimeSample.__dataclass_fields__)


def test_docs_list_every_args_field():
    from pathlib import Path

    doc = (Path(__file__).parents[2] / "docs" / "agents.md").read_text()
    assert [k for k in ARGS if f"| `{k}` |" not in doc] == []


def test_slimes_client_is_one_per_event_loop_also_for_two_loops_at_once():
    import threading

    from rlrun.agent.slime_compat import _PerLoopClient

    made = []

    class Client:  # what _PerLoopClient delegates to (an httpx.AsyncClient in a run): records its loop
        def __init__(self):
            self.loop = asyncio.get_running_loop()
            made.append(self)

        async def post(self, url, json=None, headers=None):
            await asyncio.sleep(0.01)
            assert asyncio.get_running_loop() is self.loop  # never used from another loop
            return url

    per_loop = _PerLoopClient(Client)

    async def calls(tag):
        return [await per_loop.post(f"{tag}{i}") for i in range(3)]

    out = {}
    threads = [threading.Thread(target=lambda t=t: out.update({t: asyncio.run(calls(t))})) for t in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == {"a": ["a0", "a1", "a2"], "b": ["b0", "b1", "b2"]} and len(made) == 2
    asyncio.run(calls("c"))  # a later loop (the next rollout) gets its own; closed loops' clients are dropped
    assert len(made) == 3 and len(per_loop._clients) == 1


def test_the_rollout_side_hands_a_rollout_to_the_slime_rollout_function():
    """RolloutSide._collect with rollout.rollout_fn: the function's samples are the rollout (all kept); those it
    left unscored get data.rm_type's reward."""
    from rlrun.data.sample import Sample, Status
    from rlrun.parts.rollout_side import RolloutSide

    cfg = load(["data.rm_type=exact_match", "rollout.n_samples_per_prompt=2"])
    side = object.__new__(RolloutSide)
    side.cfg, side.judge = cfg, None  # no reward engines
    made = [Sample(prompt="p", label="a", group_id=0, response="a", status=Status.COMPLETED),
            Sample(prompt="p", label="a", group_id=0, response="b", status=Status.COMPLETED, reward=0.5)]
    calls = []
    side.rollout_fn = lambda rollout_id: calls.append(rollout_id) or made
    samples, kept, info = side._collect(7, sampling=None)
    assert calls == [7] and samples == kept == made
    assert [s.reward for s in samples] == [1.0, 0.5]  # exact_match scored the first; the function's reward stays
    assert info["time/rollout_fn_s"] >= 0.0
