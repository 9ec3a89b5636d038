"""The real demo model the real-model tests share: its id, its directory's name, eight varied
prompts (one engine's tests and the other's ask the same)."""

REAL = "HuggingFaceTB/SmolLM2-135M-Instruct"
REAL_DIR = "HuggingFaceTB--SmolLM2-135M-Instruct"
PROMPTS = [
    "What is the capital of France? Answer in one sentence.",
    "Write a haiku about the sea.",
    "List three primary colors.",
    "What is 12 plus 30?",
    "Translate 'good morning' into Spanish.",
    "Give me one tip for sleeping better.",
    "Explain in one sentence what a CPU does.",
    "Name a famous play by William Shakespeare.",
]
