"""What generates the tokens: the in-process engine or an OpenAI-compatible server."""
