"""The client shapes, one module each (OpenAI chat and completions, Responses, Anthropic, Ollama,
embeddings, the model list): its parser, schemas, renderer and resource; `fields.py` holds what
they share."""
