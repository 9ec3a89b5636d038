"""The HTTP shell: the gunicorn worker, the Falcon app, the route table and its OpenAPI document,
schemas, errors in the upstream envelope, auth, client limits, request bodies, the listening socket, SSE."""
