"""docs/CONTRACT.md's config tree is generated from the schema and the kind registries
(rlrun.config.contract_docs): the page holds exactly what the generator prints."""
from pathlib import Path

from rlrun.config.contract_docs import BEGIN, END, config_tree
from rlrun.config.kinds import ENGINES, EngineKind

DOC = Path(__file__).resolve().parents[2] / "docs" / "CONTRACT.md"


def test_contract_config_tree_is_generated():
    text = DOC.read_text()
    block = text[text.index(BEGIN):text.index(END) + len(END)]
    assert block == config_tree(), "docs/CONTRACT.md is stale: regenerate with `python -m rlrun.config.contract_docs`"


def test_every_key_once_and_kinds_from_the_registry():
    tree = config_tree()
    rollout = tree[tree.index("    rollout:"):tree.index("    eval:")]
    assert rollout.count("generate_fn") == 1 and "engine (hf|sglang)" in rollout
    assert "fp32_grads" in tree and "cuda_graphs" in tree
    with ENGINES.registered(EngineKind("toy_engine", needs_gpu=False)):
        assert "engine (hf|sglang|toy_engine)" in config_tree()
