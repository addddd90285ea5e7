"""The base-model zoo: recipes, tokenizer, deterministic pretraining, loading by name or path."""
