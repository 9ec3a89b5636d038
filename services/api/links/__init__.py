"""How the API's threads talk to other processes: the master (commands, routing through a change of
leader), the runners (streams, embeddings, cancel), the supervisor, and the other nodes' APIs."""
