"""Rollout: engines in Ray actors, the problem data source, single/multi-turn generate functions, filters."""
