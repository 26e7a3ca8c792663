"""The experiment's vocabulary every layer imports: conditions, inserted sentences, prompts."""
