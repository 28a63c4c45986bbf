"""SGLang wire format: request parsing, sampling params, response shape (no torch needed)."""
import itertools

import pytest

from rlrun.rollout import api
from rlrun.rollout.api import RequestError

_ids = itertools.count()


def rid():
    return f"r{next(_ids)}"


def test_single_text_request_uses_sglang_defaults():
    items, is_batch = api.parse_generate_request({"text": "hi"}, rid)
    assert not is_batch and len(items) == 1
    sp = items[0].sampling
    # SGLang's SamplingParams defaults (sampling_params.py, 0.5.10.post1)
    assert (sp.max_new_tokens, sp.temperature, sp.top_p, sp.top_k) == (128, 1.0, 1.0, -1)
    assert sp.skip_special_tokens is True and sp.no_stop_trim is False
    assert items[0].text == "hi" and items[0].input_ids is None and items[0].return_logprob is False


def test_batch_of_input_ids_expands_shared_and_per_prompt_values():
    body = {"input_ids": [[1, 2], [3]], "sampling_params": {"max_new_tokens": 4, "stop": "x"},
            "return_logprob": [True, False], "rid": ["a", "b"]}
    items, is_batch = api.parse_generate_request(body, rid)
    assert is_batch
    assert [i.input_ids for i in items] == [[1, 2], [3]]
    assert [i.rid for i in items] == ["a", "b"]
    assert [i.return_logprob for i in items] == [True, False]
    assert items[1].sampling.max_new_tokens == 4 and items[1].sampling.stop == ("x",)


def test_per_prompt_list_with_wrong_length_is_refused():
    with pytest.raises(RequestError, match="sampling_params has 1 entries but the request has 2"):
        api.parse_generate_request({"text": ["a", "b"], "sampling_params": [{}]}, rid)


@pytest.mark.parametrize("body,match", [
    ({}, "exactly one of 'text' or 'input_ids'"),
    ({"text": "a", "input_ids": [1]}, "exactly one"),
    ({"text": "a", "stream": True}, "stream=true"),
    ({"text": "a", "sampling_params": {"temprature": 0.5}}, "did you mean 'temperature'"),
    ({"text": "a", "sampling_params": {"min_p": 0.1}}, "min_p=0.1 is not implemented"),
    ({"text": "a", "sampling_params": {"top_p": 0.0}}, "top_p=0.0 must be in"),
    ({"text": "a", "sampling_params": {"top_k": 0}}, "top_k=0 must be -1"),
    ({"text": "a", "sampling_params": {"max_new_tokens": None}}, "max_new_tokens=None must be a number"),
    ({"text": "a", "sampling_params": {"temperature": "hot"}}, "temperature='hot' must be a number"),
    ({"text": "a", "sampling_params": {"stop_token_ids": ["x"]}}, "must be a list of integers"),
    ({"input_ids": [[3], [4]], "rid": "x"}, "rid as a list"),
    (["not", "an", "object"], "must be a JSON object"),
])
def test_bad_requests_say_what_is_wrong(body, match):
    with pytest.raises(RequestError, match=match):
        api.parse_generate_request(body, rid)


def test_inert_parameters_at_sglang_default_are_accepted():
    sp = api.parse_sampling_params({"min_p": 0.0, "n": 1, "repetition_penalty": 1.0, "temperature": 0})
    assert sp.greedy


def test_response_has_sglang_field_names():
    result = api.GenerateResult(rid="x", text="a b", output_ids=[5, 6], prompt_tokens=3,
                                finish=api.finish_reason("length", length=2), logprobs=[-0.5, -1.0],
                                weight_version="7")
    out = result.to_json()
    assert out["text"] == "a b" and out["output_ids"] == [5, 6]
    meta = out["meta_info"]
    assert meta["id"] == "x" and meta["prompt_tokens"] == 3 and meta["completion_tokens"] == 2
    assert meta["finish_reason"] == {"type": "length", "length": 2}
    assert meta["output_token_logprobs"] == [[-0.5, 5, None], [-1.0, 6, None]]
    assert meta["weight_version"] == "7"


def test_finish_reasons_match_sglang_to_json():
    assert api.finish_reason("stop", matched=3) == {"type": "stop", "matched": 3}
    assert api.finish_reason("abort")["type"] == "abort"
    with pytest.raises(ValueError):
        api.finish_reason("eos")


def test_body_builders_validate_their_inputs():
    with pytest.raises(RequestError, match="kv_cache"):
        api.memory_occupation_body(["kv"])
    assert api.memory_occupation_body(None) == {"tags": None}
    with pytest.raises(RequestError):
        api.pause_generation_body("later")
    with pytest.raises(RequestError):
        api.abort_request_body()
    assert api.abort_request_body(abort_all=True) == {"rid": None, "abort_all": True}
