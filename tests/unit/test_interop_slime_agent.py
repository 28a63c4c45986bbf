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


def test_slime_reward_and_data_source_paths_are_reported_with_what_to_port_them_to():
    d = decode(parse_args(("--custom-rm-path gen.reward_func --data-source-path my.Source --buffer-filter-path my.f "
                           "--data-source-path slime.rollout.data_source.RolloutDataSourceWithBuffer").split()))
    why = {o.flag: w for o, w in d.unknown}
    assert "data.rm_type=module:function" in why["--custom-rm-path"]
    assert "rlrun.agent.source.DataSource" in why["--data-source-path"]
    assert "buffer_filter" in why["--buffer-filter-path"]
    assert len(d.unknown) == 3  # slime's own default data source is what rlrun does: nothing to report
