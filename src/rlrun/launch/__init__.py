"""Ray side of a run: cluster start/join and resource check, placement groups, actor env."""
