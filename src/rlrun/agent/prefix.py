"""The prefix that marks a slime function in the config (rollout.generate_fn, rollout.rollout_fn, data.rm_type:
`slime:<module>:<function>`, run by rlrun.agent.slime_adapter). Its own module so that the rules (rlrun.agent.rules,
read by `rlrun plan`) tell a slime path without importing the adapter."""
PREFIX = "slime:"
