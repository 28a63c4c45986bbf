"""Trainer backends: one Ray actor per data-parallel rank (see base.TrainerBackend)."""
