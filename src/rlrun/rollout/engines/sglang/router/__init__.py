"""The sglang_router router kind: the real sglang-router (SGLang's router, Rust) as a child process of rlrun, in front
of any engine kind that speaks the HTTP API (rlrun.rollout.api: the hf engine and the sglang engine). It lives in
the SGLang package because everything in it is SGLang's (its flags, its /workers API, its versions' quirks), not
because it needs the sglang engine kind (docs/rollout.md, "Where SGLang lives"). spec.py: its RouterKind (pure,
registered when the sglang engine kind's spec is discovered); router.py: its launcher (a RolloutRouter,
rlrun.rollout.routers.protocol)."""
