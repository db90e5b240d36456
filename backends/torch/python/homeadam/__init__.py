"""HomeAdam(W) and its baselines on the Rust core: ``homeadam.torch`` holds the optimizers."""
