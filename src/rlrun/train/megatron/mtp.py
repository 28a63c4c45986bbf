"""Multi-token prediction (model.mtp_num_layers) in the megatron backend: megatron-core's MultiTokenPredictionBlock,
built, placed (the last pipeline stage) and tied to the embedding by GPTModel itself, run only when rlrun asks.

megatron-core's GPTModel runs its MTP block in every forward and adds the MTP loss through an autograd side channel
(MTPLossAutoScaler), over all tokens unless a loss mask is given, with the schedule's own scaling. rlrun instead:
- runs the block only in the train step with train.mtp.enabled (`MTPGPTModel.mtp_run`): the log-prob forwards and a
  run with train.mtp.enabled=false compute the main model alone, whose hidden states are the same either way (the
  block's output is [main; mtp_1; ...] along the sequence, the main part the decoder's output unchanged);
- hands the MTP hidden states to the loss function beside the main ones, where rlrun.train.megatron.mtp_loss computes the loss of each
  MTP layer on the response tokens (loss-masked like the RL loss) with the output layer in chunks
  (rlrun.algo.token_stats.linear_logp_entropy, no [tokens, vocab] logits kept), normalised by the global count of
  loss-masked tokens as the torch backend normalises a per-token loss."""
from __future__ import annotations

import contextlib
import inspect

import torch
from megatron.core.models.gpt import GPTModel


@contextlib.contextmanager
def _core_mtp_off(config):
    """megatron-core's _postprocess splits the hidden states into 1 + mtp_num_layers parts and adds its own MTP loss
    whenever config.mtp_num_layers is set; the block has run (or not) before, so rlrun's postprocess hides it."""
    n = config.mtp_num_layers
    config.mtp_num_layers = None
    try:
        yield
    finally:
        config.mtp_num_layers = n


class MTPGPTModel(GPTModel):
    """GPTModel with megatron-core's MTP block (mtp_block_spec) that runs it only while `mtp_run` is set, and then
    returns (the usual output, [the hidden states of each MTP layer, [s, b, h] each]) (module docstring)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.mtp_run = False

    def _postprocess(self, hidden_states, **kw):
        run = bool(kw.pop("mtp_in_postprocess", None)) and self.mtp_run
        mtp_hidden = None
        if run:
            wanted = inspect.signature(self.mtp.forward).parameters
            args = {k: kw.get(k) for k in ("input_ids", "position_ids", "attention_mask", "rotary_pos_emb",
                                           "rotary_pos_cos", "rotary_pos_sin", "packed_seq_params",
                                           "sequence_len_offset", "padding_mask") if k in wanted}
            out = self.mtp(hidden_states=hidden_states, inference_params=None, embedding=self.embedding,
                           **args, **(kw.get("extra_block_kwargs") or {}))
            parts = torch.chunk(out, 1 + self.config.mtp_num_layers, dim=0)
            hidden_states, mtp_hidden = parts[0], list(parts[1:])
        with _core_mtp_off(self.config):
            out = super()._postprocess(hidden_states, mtp_in_postprocess=False, **kw)
        return out if mtp_hidden is None else (out, mtp_hidden)
