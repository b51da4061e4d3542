"""Training entry points for the learned schedulers (GNN, Learn-MABP); not implemented yet."""
