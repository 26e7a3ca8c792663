"""The names a user picks a backend by (the levels a record states are the run format's:
splice/rundir/records.py, `CONTINUATION_LEVELS`).

Kept free of imports, so that the command line can offer them without loading torch.
"""

BACKENDS = ("local", "openai")  # the in-process engine | an OpenAI-compatible server
APIS = ("completions", "chat")  # /v1/completions | /v1/chat/completions
PROMPT_FORMATS = ("token", "text")  # completions: ids in and out | rendered text
CONTINUE_FLAGS = ("continue_final_message", "prefix")  # chat: vLLM's flag | a provider's
