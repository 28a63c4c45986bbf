"""How long a dead engine can keep answering errors before it is out of the router: the numbers
EngineGroup (rlrun.rollout.engines.group) and RayEngine (rlrun.rollout.engines.hf.engine) poll with, and the retry
window the rollout client derives from them (rollout.retry_window_s null; docs/rollout.md).
Imports nothing: `rlrun plan` derives the window without torch or ray."""
from __future__ import annotations

HEALTH_INTERVAL_S = 0.5   # EngineGroup polls every engine this often
FAILURE_THRESHOLD = 2     # failed polls in a row before the engine is replaced
HEALTH_TIMEOUT_S = 5.0    # one poll's GET /health
ALIVE_TIMEOUT_S = 10.0    # one poll's RayEngine.alive() (ray.get of the actor's url; a lost node's actor hangs)
STOP_GRACE_S = 2.0        # RayEngine.stop(): the actor's own shutdown, then ray.kill; an idle engine's takes ms, and
                          # an engine being replaced is unhealthy (stalled, on a lost node): its shutdown never
                          # returns and its requests in flight wait for the kill (10 s here cost a stalled
                          # engine's rollout 10 s: tests/integration/test_guard_runner.py)
CONNECT_TIMEOUT_S = 10.0  # connecting to an engine for a weight push (pause, update, continue); local: ms
ROUTER_LIST_S = 10.0      # Router.workers(): GET /workers
ROUTER_DELETE_S = 10.0    # Router.remove_worker: DELETE /workers/{id}
ROUTER_GONE_S = 30.0      # Router.remove_worker: waits until the router no longer lists the worker


def engine_loss_s() -> float:
    """Worst case from an engine's death to its removal from the router: FAILURE_THRESHOLD polls, each
    waiting the interval and both timeouts (2 x 15.5 s), then the router's list, DELETE and wait (50 s):
    81 s. The rollout client retries a failed request at least this long (rollout.retry_window_s null),
    so the requests of a lost engine land on the others instead of failing the rollout."""
    poll = HEALTH_INTERVAL_S + ALIVE_TIMEOUT_S + HEALTH_TIMEOUT_S
    return FAILURE_THRESHOLD * poll + ROUTER_LIST_S + ROUTER_DELETE_S + ROUTER_GONE_S
