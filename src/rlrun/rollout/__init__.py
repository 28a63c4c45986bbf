"""Rollout: SGLang's HTTP API (api), the data plane (client, handle, generate_api), the router in front of the
engines (routers/: the RolloutRouter protocol; the built-in router kind is SGLang's router, in engines/sglang/router),
the engines (engines/: the RolloutEngine protocol, its HTTP adapter, the fleet EngineGroup, one package per engine
kind: engines/hf, engines/sglang), the hf engine's server (hf_engine, hf_server, generation), weight
transports (transports/: one module each) and their tensor plumbing (weights). Importing this package imports nothing
heavy; see docs/rollout.md and docs/sglang.md."""
