"""Rollout: SGLang's HTTP API (api), the hf engine (hf_engine, hf_server, generation), the real
sglang-router (router), the async client (client), engine groups with weight sync and fault
tolerance (engines, weights) and the sglang engine kind (sglang_args, sglang_schema, sglang_engine).
Importing this package imports nothing heavy; see docs/rollout.md and docs/sglang.md."""
