"""SGLang's parts: the sglang engine kind and the sglang_router router kind. spec.py (its EngineKind, rollout.sglang's
check and its DP/PP rules; pure; it also registers the router kind), args.py (ServerArgs from the config), schema.py
(the pinned ServerArgs and request structs, as JSON), engine.py (the server process, its Ray actor and the
RolloutEngine adapter), router/ (the sglang_router kind: sglang-router, SGLang's router, in front of any engine kind
that speaks the HTTP API, the hf engine too). docs/sglang.md, docs/rollout.md ("Where SGLang lives")."""
