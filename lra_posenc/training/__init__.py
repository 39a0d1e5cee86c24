"""Task-agnostic training machinery: batches, optimizer, checkpoints, the train loop."""
