"""api: gunicorn (gthread workers) serving the Falcon app; the OpenAI-compatible surface."""
