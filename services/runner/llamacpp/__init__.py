"""The llama.cpp engine: GGUF checkpoints served through llama.cpp (llama-cpp-python's C API)
with the runner's own continuous batch, prefix reuse and samplers (`engine.py`)."""
