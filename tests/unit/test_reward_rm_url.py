"""data.rm_url: validated with data.rm_type (remote needs it, nothing else takes it) and handed by the loop's
score step (rlrun.parts.sampling.score, which the runner calls with cfg.data.rm_url) to a real HTTP server."""
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rlrun.config import ConfigError, load
from rlrun.data import Sample


class _Reward(BaseHTTPRequestHandler):
    seen: list = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Reward.seen.append(body)
        reply = json.dumps({"reward": float(body["response"] == body["label"])}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


@pytest.fixture()
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Reward)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    _Reward.seen = []
    yield f"http://127.0.0.1:{srv.server_address[1]}/reward"
    srv.shutdown()
    srv.server_close()


def test_the_loop_scores_remote_rewards_at_data_rm_url(server):
    from rlrun.parts import sampling as steps

    cfg = load(["data.rm_type=remote", f"data.rm_url={server}"])
    samples = [Sample(prompt="p0", response="7", label="7"), Sample(prompt="p1", response="3", label="4")]
    metrics = steps.score(samples, cfg.data.rm_type, 2, cfg.data.rm_url)
    assert [s.reward for s in samples] == [1.0, 0.0]
    assert metrics["reward/errors"] == 0 and metrics["reward/count"] == 2
    assert sorted((b["prompt"], b["response"], b["label"]) for b in _Reward.seen) == [("p0", "7", "7"),
                                                                                     ("p1", "3", "4")]


def test_the_runner_hands_data_rm_url_to_every_score_call():
    # the rollout side and the evaluator call steps.score for training and eval samples; both must pass
    # the URL (a call without it raises "rm_type=remote needs a URL" at the first reward, after Ray and the
    # engines started).
    from pathlib import Path

    import rlrun.parts as parts

    files = sorted(Path(parts.__file__).parent.glob("*.py"))
    calls = [line for f in files for line in f.read_text().splitlines() if "steps.score(" in line]
    assert len(calls) >= 2 and all("self.cfg.data.rm_url" in line for line in calls), calls


@pytest.mark.parametrize("overrides, path", [
    (["data.rm_type=remote"], "data.rm_type"),                                  # remote without a URL
    (["data.rm_url=http://127.0.0.1:8000/reward"], "data.rm_url"),             # a URL nothing uses
    (["data.rm_type=remote", "data.rm_url=127.0.0.1:8000"], "data.rm_url"),    # no scheme
])
def test_rm_url_rules(overrides, path):
    with pytest.raises(ConfigError) as err:
        load(overrides)
    assert [p.path for p in err.value.problems] == [path], err.value.render()


def test_an_eval_set_scored_remotely_takes_data_rm_url():
    ds = "eval.datasets=[{name: held, path: /data/held.jsonl, rm_type: remote}]"
    assert load([ds, "data.rm_url=http://127.0.0.1:8000/reward"]).data.rm_url.endswith("/reward")
