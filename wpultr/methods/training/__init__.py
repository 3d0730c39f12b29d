"""What the methods' training shares: the trainer over padded session lists, warm-up, the GBDT route, streaming
and DDP."""
