"""rlrun's view of SGLang (ServerArgs fields, request dataclasses) against the pinned sglang source.

The committed JSON snapshots are re-extracted from the sglang wheel when it is available
(RLRUN_SGLANG_WHEEL=path, or the pip download location used by the docs) and must be identical.
"""
import inspect
import os
from pathlib import Path

import pytest

from rlrun.config import load
from rlrun.rollout import api
from rlrun.rollout.engines.sglang import schema as sglang_schema
from rlrun.rollout.engines.sglang.args import EngineSlot, check_sglang_mapping, server_args, to_argv

def _wheel():
    wheel = os.environ.get("RLRUN_SGLANG_WHEEL", "")
    if wheel and Path(wheel).is_file():
        return wheel
    pytest.skip("sglang wheel not present: `pip download sglang==0.5.16 --no-deps -d DIR` and set "
                "RLRUN_SGLANG_WHEEL=DIR/sglang-0.5.16-cp311-cp311-manylinux_2_34_x86_64.whl")


def test_snapshots_equal_a_fresh_extraction_from_the_wheel():
    server_args_now, io_now = sglang_schema.extract_from_wheel(_wheel())
    assert server_args_now == sglang_schema.server_args_schema()
    assert io_now == sglang_schema.io_struct_schema()


def test_snapshot_has_the_fields_rlrun_relies_on():
    fields = sglang_schema.server_args_schema()["fields"]
    assert len(fields) > 400  # 445 in 0.5.16 (349 in 0.5.10.post1)
    assert fields["tp_size"]["cli"]["flag"] == "--tp-size"  # dest differs: --tensor-parallel-size
    assert fields["enable_memory_saver"]["cli"]["action"] == "store_true"
    assert fields["mem_fraction_static"]["type"] == "Optional[float]"


@pytest.mark.parametrize("endpoint", sorted(api.BODY_BUILDERS))
def test_weight_sync_bodies_match_sglang_request_dataclasses(endpoint):
    builder, cls_name = api.BODY_BUILDERS[endpoint]
    schema = sglang_schema.io_struct_schema()["classes"][cls_name]["fields"]
    # call each builder with placeholder values for its required parameters
    params = inspect.signature(builder).parameters
    samples = {"model_path": "/m", "weight_version": "3", "serialized_named_tensors": ["x"],
               "master_address": "h", "master_port": 1, "rank_offset": 1, "world_size": 2,
               "names": ["w"], "dtypes": ["float32"], "shapes": [[2]]}
    args = {n: samples[n] for n, p in params.items() if p.default is inspect.Parameter.empty
            and p.kind != p.VAR_KEYWORD}
    body = builder(**args) if endpoint != "/abort_request" else builder(abort_all=True)
    unknown = set(body) - set(schema)
    assert not unknown, f"{endpoint}: {unknown} are not fields of sglang's {cls_name}"
    missing = {n for n, f in schema.items() if f["required"]} - set(body)
    assert not missing, f"{endpoint}: required {cls_name} fields {missing} are missing"


def test_generate_request_fields_the_client_sends_exist_in_sglang():
    fields = sglang_schema.io_struct_schema()["classes"]["GenerateReqInput"]["fields"]
    for name in ("text", "input_ids", "sampling_params", "return_logprob", "rid", "stream"):
        assert name in fields


def test_unknown_sglang_key_fails_with_did_you_mean():
    problems = check_sglang_mapping({"cuda_graph_max_bz": 64, "chunked_prefill_size": 4096})
    assert [p.path for p in problems] == ["rollout.sglang.cuda_graph_max_bz"]
    assert 'did you mean "cuda_graph_max_bs"' in problems[0].message


def test_fields_declared_in_annotations_and_renamed_spellings():
    """0.5.13+ declares most flags as `A[type, Arg(...)]` annotations; older spellings stay accepted."""
    schema = sglang_schema.server_args_schema()
    fields, renamed = schema["fields"], schema["renamed"]
    assert fields["cuda_graph_backend_decode"]["cli"]["choices"] == ["full", "breakable", "tc_piecewise", "disabled"]
    assert fields["disable_radix_cache"]["cli"]["action"] == "store_true"
    assert fields["disable_cuda_graph"]["cli"]["deprecated"] == "DeprecatedStoreTrueAction"
    assert renamed["cuda_graph_max_bs"]["field"] == "cuda_graph_max_bs_decode"
    assert check_sglang_mapping({"cuda_graph_max_bs": 64, "cuda_graph_max_bs_decode": 64}) == []
    assert to_argv({"cuda_graph_max_bs": 64, "disable_cuda_graph": True}) == [
        "--cuda-graph-max-bs", "64", "--disable-cuda-graph"]
    assert [p.path for p in check_sglang_mapping({"disable_piecewise_cuda_graph": "yes"})] == [
        "rollout.sglang.disable_piecewise_cuda_graph"]


def test_one_sglang_field_set_under_two_names_is_refused_unless_the_same_value():
    """SGLang's parser keeps the last of a field's spellings on the command line: a second one would vanish."""
    assert check_sglang_mapping({"cuda_graph_max_bs": 64, "cuda_graph_max_bs_decode": 64}) == []
    problems = check_sglang_mapping({"cuda_graph_max_bs": 32, "cuda_graph_max_bs_decode": 16})
    assert [(p.path, p.fix) for p in problems] == [
        ("rollout.sglang.cuda_graph_max_bs", "keep one of them: rollout.sglang.cuda_graph_max_bs_decode")]
    assert "cuda_graph_max_bs=32, rollout.sglang.cuda_graph_max_bs_decode=16" in problems[0].message
    # a switch that stores a constant into the field: refused beside the field itself, whatever the value
    assert [p.path for p in check_sglang_mapping({"disable_piecewise_cuda_graph": True,
                                                  "cuda_graph_backend_prefill": "breakable"})] == [
        "rollout.sglang.disable_piecewise_cuda_graph"]
    assert [p.path for p in check_sglang_mapping({"disable_piecewise_cuda_graph": True,
                                                  "enforce_piecewise_cuda_graph": True})] == [
        "rollout.sglang.disable_piecewise_cuda_graph"]
    # a switch left off passes no flag
    assert check_sglang_mapping({"disable_piecewise_cuda_graph": False, "cuda_graph_backend_prefill": "breakable"}) == []


def test_older_spellings_get_their_fields_type_and_their_own_choices_checked():
    assert [p.fix for p in check_sglang_mapping({"cuda_graph_max_bs": "many"})] == ["give a value of type Optional[int]"]
    problems = check_sglang_mapping({"nsa_decode_backend": "flashmla_sprase"})
    assert len(problems) == 1 and 'did you mean "flashmla_sparse"' in problems[0].message
    assert check_sglang_mapping({"nsa_decode_backend": "fa3", "cuda_graph_bs": [1, 2, 4]}) == []


def test_typed_fields_cannot_be_set_twice_and_types_are_checked():
    problems = check_sglang_mapping({"tp_size": 4, "disable_radix_cache": "yes", "log_level": "info"})
    assert {p.path: p.fix for p in problems} == {
        "rollout.sglang.tp_size": "remove rollout.sglang.tp_size and set rollout.gpus_per_engine instead",
        "rollout.sglang.disable_radix_cache": "give a value of type bool",
    }


def _argv_fields(argv):
    return {a for a in argv if a.startswith("--")}


def test_server_args_for_the_seed_recipe_on_mi300x():
    cfg = load(["experiment=qwen3-4b-grpo-mi300x"])
    args = server_args(cfg, EngineSlot(rank=3, base_gpu_id=6, port=31000, nccl_port=31001))
    assert args == {"model_path": "/root/Qwen3-4B", "host": "127.0.0.1", "port": 31000, "nccl_port": 31001,
                    "tp_size": 2, "base_gpu_id": 6, "mem_fraction_static": 0.7,
                    "context_length": cfg.rollout.context_length, "random_seed": 1234 + 3}
    assert "enable_memory_saver" not in args  # offload is off on AMD (hardware profile)
    fields = sglang_schema.server_args_schema()["fields"]
    argv = to_argv(args)
    for name, value in args.items():  # every flag is the pinned ServerArgs' flag, followed by its value
        i = argv.index(fields[name]["cli"]["flag"])
        assert argv[i + 1] == str(value)


def test_server_args_for_a_disaggregated_h100_config_with_offload_and_extras():
    cfg = load(["hardware=h100", "model=qwen3-4b", "checkpoint.hf=/ckpt/qwen3-4b", "train.colocate=false",
                "train.gpus_per_node=4", "rollout.num_gpus=4", "rollout.gpus_per_engine=2", "rollout.offload=true",
                "+rollout.sglang.cuda_graph_max_bs=64", "+rollout.sglang.disable_radix_cache=true",
                "+rollout.sglang.attention_backend=fa3"])
    args = server_args(cfg, EngineSlot(rank=1, base_gpu_id=2, port=32000, nccl_port=32001))
    assert args["tp_size"] == 2 and args["base_gpu_id"] == 2 and args["enable_memory_saver"] is True
    argv = to_argv(args)
    assert argv[argv.index("--cuda-graph-max-bs") + 1] == "64"
    assert "--disable-radix-cache" in argv and "--enable-memory-saver" in argv
    assert argv[argv.index("--attention-backend") + 1] == "fa3"
    schema = sglang_schema.server_args_schema()  # every flag is one SGLang parses (old spellings included)
    assert _argv_fields(argv) <= ({f["cli"]["flag"] for f in schema["fields"].values() if f["cli"]}
                                  | {r["flag"] for r in schema["renamed"].values()})


def test_pipeline_stages_split_an_engines_gpus():
    """slime's sglang validate_args: sglang_tp_size = rollout_num_gpus_per_engine // sglang_pp_size; an engine of 4
    GPUs with pp_size 2 is 2 stages of TP 2 (2 x 2 = the 4 GPUs the placement gives it)."""
    cfg = load(["hardware=h100", "model=qwen3-4b", "checkpoint.hf=/ckpt/qwen3-4b", "rollout.gpus_per_engine=4",
                "+rollout.sglang.pp_size=2"])
    args = server_args(cfg, EngineSlot(rank=0, base_gpu_id=0, port=32000, nccl_port=32001))
    assert (args["tp_size"], args["pp_size"]) == (2, 2)


def test_store_true_false_is_omitted_and_lists_expand():
    assert to_argv({"disable_radix_cache": False, "log_level": None}) == []
    argv = to_argv({"cuda_graph_bs": [1, 2, 4]})
    assert argv == ["--cuda-graph-bs", "1", "2", "4"]


def test_each_node_of_an_engine_over_two_nodes_gets_its_node_rank_and_node_0s_address():
    """An engine of 16 GPUs on nodes of 8: two `sglang.launch_server` processes, one per node, both TP 16 with the
    same seed, each on its node's GPUs 0-7 (--base-gpu-id 0), told the node count, its rank and node 0's
    host:port (slime's _compute_server_args gives the same nnodes / node_rank / dist_init_addr). Expected argv by
    hand: mem_fraction_static 0.7 (set: the auto pool is tests/unit/test_offload_decision.py's) and offload on
    (--enable-memory-saver), qwen3-0.6b's context 40960."""
    cfg = load(["hardware=h100", "model=qwen3-0.6b", "checkpoint.hf=/ckpt/qwen3-0.6b", "train.num_nodes=2",
                "cluster.num_nodes=2", "rollout.gpus_per_engine=16", "rollout.mem_fraction_static=0.7"])
    common = ["--model-path", "/ckpt/qwen3-0.6b", "--host", "127.0.0.1"]
    tail = ["--tp-size", "16", "--base-gpu-id", "0", "--mem-fraction-static", "0.7", "--context-length", "40960",
            "--random-seed", "1234", "--nnodes", "2"]
    for node_rank, port in ((0, 31000), (1, 32000)):
        slot = EngineSlot(rank=0, base_gpu_id=0, port=port, nccl_port=port + 1, nnodes=2, node_rank=node_rank,
                          dist_init_addr="10.0.0.1:40000")
        assert to_argv(server_args(cfg, slot)) == [
            *common, "--port", str(port), "--nccl-port", str(port + 1), *tail,
            "--node-rank", str(node_rank), "--dist-init-addr", "10.0.0.1:40000", "--enable-memory-saver"]
    # an engine on one node gets none of the three flags
    one = to_argv(server_args(cfg, EngineSlot(rank=0, base_gpu_id=0, port=31000, nccl_port=31001)))
    assert not {"--nnodes", "--node-rank", "--dist-init-addr"} & set(one)
    with pytest.raises(ValueError, match="spans 2 nodes but has no dist_init_addr"):
        server_args(cfg, EngineSlot(rank=0, base_gpu_id=0, port=31000, nccl_port=31001, nnodes=2, node_rank=1))


def test_async_engines_run_without_a_prefix_cache_unless_pushes_can_flush_it():
    """The async loop pushes with requests paused in place, so it cannot flush the engines' prefix cache (SGLang
    0.5.16 flushes only an idle engine): its engines run without one, or prefixes cached under old weights are reused
    for ever (rlrun.config.sizes.push_flushes_cache). With partial_rollout the push aborts first and can flush."""
    base = ["hardware=h100", "model=qwen3-0.6b", "checkpoint.hf=/ckpt", "train.colocate=false", "rollout.num_gpus=1",
            "train.gpus_per_node=1"]
    slot = EngineSlot(rank=0, base_gpu_id=1, port=32000, nccl_port=32001)
    assert "disable_radix_cache" not in server_args(load(base), slot)
    assert server_args(load(base + ["train.async_train=true"]), slot)["disable_radix_cache"] is True
    assert "disable_radix_cache" not in server_args(load(base + ["train.async_train=true",
                                                                 "rollout.partial_rollout=true"]), slot)
    mine = load(base + ["train.async_train=true", "+rollout.sglang.disable_radix_cache=false"])
    assert server_args(mine, slot)["disable_radix_cache"] is False  # the user's rollout.sglang wins


def test_choices_named_by_a_module_constant_are_resolved_and_plugin_lists_refuse_only_misspellings():
    """server_args.py names most flags' choices by a module constant (`choices=ATTENTION_BACKEND_CHOICES`): the
    extraction resolves names, list/tuple/set literals and `+`; a list a module function extends (SGLang plugins'
    add_*_choices) is marked extensible. The gate then refuses a value outside a closed list, and outside an
    extensible one only a near miss (difflib's 0.6 cutoff): another value may be a plugin's."""
    source = '''
BACKENDS = ["triton", "fa3"]
MORE = BACKENDS + ["flashinfer"]
SAMPLERS = {"pytorch", "flashinfer"}
def add_backend_choices(choices):
    BACKENDS.extend(choices)
class ServerArgs:
    attention_backend: A[Optional[str], Arg(choices=BACKENDS)] = None
    decode_backend: A[Optional[str], Arg(choices=MORE)] = None
    sampling_backend: A[Optional[str], Arg(choices=SAMPLERS)] = None
    tool_call_parser: A[Optional[str], Arg(choices=["auto"] + parsers)] = None
'''
    fields = sglang_schema.extract_server_args(source)["fields"]
    assert fields["attention_backend"]["cli"]["choices"] == ["triton", "fa3"]
    assert fields["attention_backend"]["cli"]["choices_extensible"] is True
    # MORE was copied from BACKENDS at import, before any plugin extends BACKENDS: a closed list
    assert fields["decode_backend"]["cli"]["choices"] == ["triton", "fa3", "flashinfer"]
    assert "choices_extensible" not in fields["decode_backend"]["cli"]
    assert fields["sampling_backend"]["cli"]["choices"] == ["flashinfer", "pytorch"]
    assert "choices_extensible" not in fields["sampling_backend"]["cli"]
    assert fields["tool_call_parser"]["cli"]["choices"] == "['auto'] + parsers"  # unresolved: SGLang decides
    # the shipped snapshot: fp8_gemm_runner_backend's list is resolved and plugin-extensible, sampling_backend's closed
    got = {p.value: p.message for p in check_sglang_mapping({"fp8_gemm_runner_backend": "deepgem"})}
    assert 'did you mean "deep_gemm"' in got["deepgem"]
    assert check_sglang_mapping({"fp8_gemm_runner_backend": "deep_gemm"}) == []
    assert check_sglang_mapping({"fp8_gemm_runner_backend": "my_vendor_kernel"}) == []  # a plugin's, perhaps
    assert [p.path for p in check_sglang_mapping({"sampling_backend": "my_vendor_sampler"})] == \
        ["rollout.sglang.sampling_backend"]
