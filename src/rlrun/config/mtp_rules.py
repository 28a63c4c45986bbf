"""Multi-token prediction (model.mtp_num_layers, train.mtp): what the trainer backend and the checkpoint must have for
it (rlrun validate). The layers' values themselves are checked against config.json by hfcheck (num_nextn_predict_layers).
Pure Python: `rlrun plan` imports it."""
from __future__ import annotations

from typing import Iterator

from rlrun.config.errors import Problem
from rlrun.config.families import FAMILIES
from rlrun.config.kinds import BACKENDS, ENGINES
from rlrun.config.registry import RULES as rule
from rlrun.config.schema import RunConfig


def _mtp_backends() -> str:
    return ", ".join(n for n, b in BACKENDS.items() if b.mtp) or "none"


@rule
def mtp(cfg: RunConfig) -> Iterator[Problem]:
    m, t = cfg.model, cfg.train
    n = m.mtp_num_layers
    if t.mtp.enabled and n == 0:
        yield Problem("train.mtp.enabled", "MTP training needs MTP layers, and model.mtp_num_layers is 0",
                      "set model.mtp_num_layers to the checkpoint's num_nextn_predict_layers (config.json), or "
                      "train.mtp.enabled=false", True)
    if n == 0:
        return
    fam = FAMILIES[m.family]
    if fam.mtp_names is None:
        having = [name for name, f in FAMILIES.items() if f.mtp_names]
        yield Problem("model.mtp_num_layers", f"family {m.family}'s checkpoints carry no multi-token prediction "
                      f"layers (rlrun maps them for {', '.join(having)})",
                      "set model.mtp_num_layers=0", n)
    if not BACKENDS[t.backend].mtp:
        yield Problem("train.backend", f"the {t.backend} backend builds no multi-token prediction block: the "
                      f"{n} MTP layer(s) of model.mtp_num_layers would be neither loaded, trained nor synced to the "
                      "engines (a speculative-decoding draft reads them)",
                      f"set train.backend={_mtp_backends()}, or model.mtp_num_layers=0", t.backend)
    if not ENGINES[cfg.rollout.engine].mtp_weights:
        takes = ", ".join(e for e, spec in ENGINES.items() if spec.mtp_weights) or "none"
        yield Problem("rollout.engine", f"the {cfg.rollout.engine} engine's model has no MTP layers: every weight sync "
                      "would send it tensors it cannot place", f"set rollout.engine={takes}, or model.mtp_num_layers=0",
                      cfg.rollout.engine)
    if cfg.checkpoint.hf is None:
        yield Problem("model.mtp_num_layers", f"{n} MTP layer(s) come from the checkpoint, and checkpoint.hf is null "
                      "(random init has no MTP weights: transformers builds none)",
                      "set checkpoint.hf to a checkpoint with num_nextn_predict_layers in its config.json, or "
                      "model.mtp_num_layers=0", n)
    if t.mtp.enabled and t.cuda_graphs:
        yield Problem("train.cuda_graphs", "megatron-core's MTP block rolls each packed sequence on the host (its "
                      "cu_seqlens), which a captured micro-batch cannot replay; MTP training is not captured",
                      "set train.cuda_graphs=false, or train.mtp.enabled=false", True)
    if t.mtp.enabled and m.lora.rank:
        yield Problem("train.mtp.enabled", "model.lora freezes every base weight, the MTP layers' too (the adapters "
                      "wrap the decoder's layers only): the MTP loss would train nothing of the MTP layers",
                      "set train.mtp.enabled=false (the MTP layers stay as loaded and still sync), or model.lora.rank=0",
                      True)
    layout = t.megatron.get("pipeline_model_parallel_layout")
    if layout is not None:
        yield Problem("train.megatron.pipeline_model_parallel_layout", "with MTP layers rlrun places them on the "
                      "last pipeline stage (megatron-core's default); a custom layout may put them elsewhere",
                      "remove train.megatron.pipeline_model_parallel_layout", layout)
