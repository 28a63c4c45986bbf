"""The hf engine kind: a Hugging Face model behind SGLang's HTTP API (rlrun.rollout.hf_engine, hf_server), on the
CPU or one GPU. spec.py: its EngineKind (pure); engine.py: its Ray actor and RolloutEngine adapter."""
