"""Storage-layer constructs: FSx for Lustre for training data and checkpoints."""
