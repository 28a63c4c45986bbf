"""The sglang_router router kind: the real sglang-router (Rust) as a child process of rlrun. spec.py: its RouterKind
(pure); router.py: its launcher (a RolloutRouter, rlrun.rollout.routers.protocol)."""
