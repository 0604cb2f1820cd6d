"""Cost files: one per operation (its normaliser, terms and predictors)."""
