"""Ray orchestration: placement groups, the training actor group, the rollout manager."""
