"""`rlrun import slime` of slime's MIS example (--custom-tis-function-path ...mis.compute_mis_weights_with_cp with
its YAML in --custom-config-path), OPSM and --use-unbiased-kl: the algo values and what is refused."""
import yaml

from rlrun.interop.slime_decode import decode, parse_args

MIS = "examples.train_infer_mismatch_helper.mis.compute_mis_weights_with_cp"
ICEPOP = "slime.backends.megatron_utils.loss.icepop_function"
# slime's own example config (examples/train_infer_mismatch_helper/mis.yaml at 624b824), values as there
EXAMPLE = {"use_tis": True, "use_rs": True, "tis_level": "token", "rs_level": "token", "tis_mode": "truncate",
           "tis_lower_bound": 0.5, "tis_upper_bound": 2.0, "rs_lower_bound": None, "rs_upper_bound": None,
           "rs_veto_threshold": 1.0e-4, "tis_batch_normalize": True}


def _decode(tmp_path, *flags, config=None):
    argv = list(flags)
    if config is not None:
        (tmp_path / "mis.yaml").write_text(yaml.safe_dump(config))
        argv += ["--custom-config-path", str(tmp_path / "mis.yaml")]
    d = decode(parse_args(argv))
    return {k: v for k, v in d.values.items() if k.startswith("algo.")}, [why for _, why in d.unknown]


def test_slimes_example_config(tmp_path):
    v, unknown = _decode(tmp_path, "--use-tis", "--custom-tis-function-path", MIS, config=EXAMPLE)
    assert unknown == []
    # truncate: clamp(0, upper); rs bounds null -> the TIS bounds (lower 0.5 given); the rs stage rejects -> all
    assert {k: v[k] for k in ("algo.tis_mode", "algo.tis_clip_low", "algo.tis_clip", "algo.use_rs", "algo.rs_level",
                              "algo.rs_clip_low", "algo.rs_clip", "algo.rs_veto_threshold",
                              "algo.tis_batch_normalize", "algo.tis_reject_scope")} == {
        "algo.tis_mode": "truncate", "algo.tis_clip_low": 0.0, "algo.tis_clip": 2.0, "algo.use_rs": True,
        "algo.rs_level": "token", "algo.rs_clip_low": 0.5, "algo.rs_clip": 2.0, "algo.rs_veto_threshold": 1e-4,
        "algo.tis_batch_normalize": True, "algo.tis_reject_scope": "all"}


def test_mask_mode_without_lower_bound_and_without_rs(tmp_path):
    cfg = {**EXAMPLE, "use_rs": False, "tis_mode": "mask", "tis_lower_bound": None, "tis_upper_bound": 4.0,
           "tis_batch_normalize": False}
    v, unknown = _decode(tmp_path, "--use-tis", "--custom-tis-function-path", MIS, config=cfg)
    assert unknown == []
    assert (v["algo.tis_mode"], v["algo.tis_clip_low"], v["algo.tis_clip"], v["algo.tis_reject_scope"]) == \
        ("mask", 0.25, 4.0, "all")  # mis.py: lower = 1 / upper


def test_icepop_keeps_rejection_to_the_pg_term_and_opsm_is_against_old():
    v = decode(parse_args(["--use-tis", "--custom-tis-function-path", ICEPOP, "--use-opsm", "--use-kl-loss",
                           "--use-unbiased-kl"])).values
    assert v["algo.tis_mode"] == "mask" and v.get("algo.tis_reject_scope", "pg") == "pg"
    assert v["algo.opsm_reference"] == "old" and v["algo.use_unbiased_kl"] is True
    assert "algo.opsm_reference" not in decode(parse_args(["--use-tis"])).values  # rlrun's default without OPSM


def test_what_cannot_be_carried_over_is_reported(tmp_path):
    _, unknown = _decode(tmp_path, "--use-tis", "--custom-tis-function-path", MIS)
    assert any("without --custom-config-path" in u for u in unknown)
    _, unknown = _decode(tmp_path, "--use-tis", config={"some_generate_setting": 3})
    assert any("rlrun reads it only for slime's MIS example" in u for u in unknown)
    _, unknown = _decode(tmp_path, "--use-tis", "--custom-tis-function-path", MIS,
                         config={**EXAMPLE, "tis_level": "geometric", "extra": 1})
    assert any("mis.py raises ValueError" in u for u in unknown) and any("'extra'" in u for u in unknown)
    _, unknown = _decode(tmp_path, "--use-tis", "--custom-tis-function-path", MIS,
                         config={k: x for k, x in EXAMPLE.items() if k != "tis_mode"})
    assert any("lacks them" in u and "tis_mode" in u for u in unknown)
    unknown = [why for _, why in decode(parse_args(["--custom-tis-function-path", MIS, "--custom-config-path",
                                                    str(tmp_path / "absent.yaml")])).unknown]
    assert any("cannot read the MIS config" in u for u in unknown)
