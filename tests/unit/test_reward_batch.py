"""score_batch: worker pool with hard time limits, hostile outputs, remote HTTP and custom functions."""

import asyncio
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rlrun.reward import RewardPool, per_group, score, score_batch

LIMIT = 5.0
HUGE = "x" * 10_000_000  # 10 MB
NESTED = "</think> \\boxed{" + "{" * 100_000 + "1" + "}" * 100_000 + "}"
UNBALANCED = "</think> \\boxed{" + "{(" * 500_000


@pytest.fixture(scope="module")
def pool():
    with RewardPool(num_workers=2) as p:
        yield p


def sleepy(response, label, metadata):  # a custom reward that never finishes in time
    time.sleep(60)
    return 1.0


def boom(response, label, metadata):
    raise RuntimeError("grader bug")


async def async_len(response, label, metadata):
    await asyncio.sleep(0)
    return float(len(response) == int(label))


@per_group
def group_rank(responses, labels, metadatas):  # 1 for the longest response of the group
    longest = max(len(r) for r in responses)
    return [float(len(r) == longest) for r in responses]


def test_batch_matches_single_scores(pool):
    responses = ["</think> \\boxed{1/2}", "</think> \\boxed{0.3}", "no think \\boxed{0.5}"]
    labels = ["0.5", "0.5", "0.5"]
    metrics = {}
    out = score_batch("deepscaler", responses, labels, pool=pool, metrics=metrics)
    assert out == [score("deepscaler", r, y) for r, y in zip(responses, labels)] == [1.0, 0.0, 0.0]
    assert metrics["reward/count"] == 3 and metrics["reward/timeouts"] == 0 and metrics["reward/errors"] == 0


@pytest.mark.parametrize("rm_type", ["deepscaler", "math", "dapo", "f1", "gpqa", "exact_match", "boxed_math"])
def test_hostile_outputs_score_zero_within_limit(pool, rm_type):
    metrics = {}
    t0 = time.monotonic()
    out = score_batch(rm_type, [HUGE, NESTED, UNBALANCED], ["1", "1", "1"], pool=pool, timeout_s=LIMIT,
                      metrics=metrics)
    elapsed = time.monotonic() - t0
    # every sample finishes or is cut at its limit; with 2 workers 3 samples take <= 2 limits
    assert elapsed < 2 * LIMIT + 10, f"{rm_type} took {elapsed:.1f}s"
    bad = -1.0 if rm_type == "dapo" else 0.0
    assert out[0] == bad and out[2] == bad
    assert metrics["reward/count"] == 3


def test_hang_is_cut_and_counted_and_batch_goes_on(pool):
    metrics = {}
    t0 = time.monotonic()
    out = score_batch(f"{__name__}:sleepy", ["a", "b"], ["1", "1"], pool=pool, timeout_s=1.0, metrics=metrics)
    assert out == [0.0, 0.0] and metrics["reward/timeouts"] == 2
    assert time.monotonic() - t0 < 30  # replacing the killed workers included
    # the pool still works after losing its workers
    assert score_batch("math", ["\\boxed{2}"], ["2"], pool=pool) == [1.0]


@pytest.mark.parametrize("rm_type", ["deepscaler", "math"])
def test_sympy_blowup_is_cut_at_the_limit(pool, rm_type):
    # math-verify alone needs ~5 s (its own alarm) to give up on this tower; the pool cuts it at 2 s
    metrics = {}
    t0 = time.monotonic()
    out = score_batch(rm_type, ["</think> \\boxed{9^{9^{9^{9^{9}}}}}", "</think> \\boxed{1}"], ["1", "1"],
                      pool=pool, timeout_s=2.0, metrics=metrics)
    assert out == [0.0, 1.0] and metrics["reward/timeouts"] == 1
    assert time.monotonic() - t0 < 2.0 + 15  # the limit plus starting a replacement worker


def test_errors_are_counted_not_raised(pool):
    metrics = {}
    assert score_batch(f"{__name__}:boom", ["a"], ["1"], pool=pool, metrics=metrics) == [0.0]
    assert metrics["reward/errors"] == 1
    metrics = {}  # a missing response (None) in an in-process type and a pooled type
    assert score_batch("exact_match", [None, "1"], ["1", "1"], metrics=metrics) == [0.0, 1.0]
    assert score_batch("f1", [None], ["1"], pool=pool, metrics=metrics) == [0.0]
    assert metrics["reward/errors"] == 2


def test_custom_async_and_per_group(pool):
    assert score_batch(f"{__name__}:async_len", ["ab", "abc"], ["2", "2"], pool=pool) == [1.0, 0.0]
    assert score(f"{__name__}:async_len", "ab", "2") == 1.0
    out = score_batch(f"{__name__}:group_rank", ["a", "aaa", "aa", "a"], [None] * 4, group_size=2, pool=pool)
    assert out == [0.0, 1.0, 1.0, 0.0]


def test_bad_custom_path_fails_fast():
    with pytest.raises(ValueError, match="cannot import 'no_such_mod'"):
        score_batch("no_such_mod:fn", ["a"], ["b"])
    with pytest.raises(ValueError, match="has no function or class 'nope'"):
        score_batch(f"{__name__}:nope", ["a"], ["b"])


def test_length_mismatch():
    with pytest.raises(ValueError, match="2 responses, 1 labels"):
        score_batch("f1", ["a", "b"], ["a"])


class _Handler(BaseHTTPRequestHandler):
    calls = {"flaky": 0}

    def do_POST(self):  # noqa: N802 - http.server API
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/flaky":
            _Handler.calls["flaky"] += 1
            if _Handler.calls["flaky"] <= 2:
                self.send_response(503)
                self.end_headers()
                return
        if self.path == "/slow":
            time.sleep(3)
        reward = float(body["response"] == body["label"])
        data = json.dumps(reward if self.path == "/plain" else {"reward": reward}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        try:
            self.wfile.write(data)
        except BrokenPipeError:  # the client gave up (the /slow timeout test)
            pass

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_remote_scores_retries_and_timeouts(server):
    assert score_batch("remote", ["a", "b"], ["a", "a"], remote_url=f"{server}/rm") == [1.0, 0.0]
    assert score("remote", "a", "a", remote_url=f"{server}/plain") == 1.0
    metrics = {}
    assert score_batch("remote", ["a"], ["a"], remote_url=f"{server}/flaky", max_retries=3, metrics=metrics) == [1.0]
    assert _Handler.calls["flaky"] == 3 and metrics["reward/errors"] == 0
    metrics = {}
    t0 = time.monotonic()
    out = score_batch("remote", ["a"], ["a"], remote_url=f"{server}/slow", timeout_s=0.5, max_retries=1,
                      metrics=metrics)
    assert out == [0.0] and metrics["reward/timeouts"] == 1 and time.monotonic() - t0 < 3
    metrics = {}
    score_batch("remote", ["a"], ["a"], remote_url="http://127.0.0.1:9/none", max_retries=0, metrics=metrics)
    assert metrics["reward/errors"] == 1


def test_remote_huge_response_within_limit(server):
    t0 = time.monotonic()
    assert score_batch("remote", [HUGE], ["1"], remote_url=f"{server}/rm", timeout_s=LIMIT) == [0.0]
    assert time.monotonic() - t0 < LIMIT


def test_remote_needs_url():
    with pytest.raises(ValueError, match="rm_type=remote needs a URL"):
        score_batch("remote", ["a"], ["a"])
