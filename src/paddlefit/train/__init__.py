"""``paddlefit train``: the training loop, atomic checkpoints, signal handling and the launcher wrapper."""
