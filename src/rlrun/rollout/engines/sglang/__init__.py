"""The sglang engine kind: spec.py (its EngineKind, rollout.sglang's check and its DP/PP rules; pure), args.py
(ServerArgs from the config), schema.py (the pinned ServerArgs and request structs, as JSON), engine.py (the
server process, its Ray actor and the RolloutEngine adapter). docs/sglang.md."""
