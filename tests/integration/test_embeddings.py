"""`POST /v1/embeddings` on a real node serving the demo embedding model next to the demo text
model, through the real `openai` SDK: shape, normalisation, determinism, batches, base64 equal to
float, `dimensions`, and the errors (400 for the text model, 404 for an unknown one). Beside
them, an embedding GGUF imported by `skulk model add` is served by llama.cpp on this CPU node,
and its vectors are llama.cpp's own for the same file; so is a BERT-style file's (an encoder with a
WordPiece vocabulary, random weights: `tools.random_gguf --arch bert`), whose tokenizer the import
rebuilds to tokenize as llama.cpp does."""

from __future__ import annotations

import base64
import json
import math
import struct
import subprocess
import sys
from pathlib import Path

import openai
import pytest

from tests.integration.conftest import DEMO_DIR
from tests.integration.gguf_files import with_pooling, wordpiece_tokenizer
from tests.integration.harness import wait_until
from tests.integration.patience import patience
from tests.integration.serving import MODEL, http_json, ready_runners

EMBED_MODEL = "skulk/demo-embed"
EMBED_DIR = "skulk--demo-embed"
WIDTH = 128  # the demo embedding model's hidden size
TEXTS = ["hello world", "Beautiful is better than ugly.", "Explicit is better than implicit, they say."]
GGUF_EMBED = "local/smollm2-embed"
GGUF_EMBED_DIR = "local--smollm2-embed"
GGUF_EMBED_MLX = "local/smollm2-embed-mlx"  # the same file under another id, placed on MLX
GGUF_EMBED_MLX_DIR = "local--smollm2-embed-mlx"
BERT, BERT_CASED = "local/rand-bert", "local/rand-bert-cased"
BERT_SHAPE = ("--arch", "bert", "--hidden", "64", "--layers", "2", "--heads", "4", "--ffn", "128", "--context", "512",
              "--std", "0.5", "--embed-std", "2.0")


@pytest.fixture(scope="session")
def demo_embed_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo embedding model, built once per session by the real CLI (keeps mlx out of pytest)."""
    home = tmp_path_factory.mktemp("demo-embed-home")
    out = subprocess.run([sys.executable, "-m", "skulk.scripts.cli", "model", "demo", "--kind", "embedding",
                          "--home", str(home)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert EMBED_MODEL in out.stdout
    return home / "models" / EMBED_DIR


@pytest.fixture(scope="module")
def gguf_embed_model(tmp_path_factory: pytest.TempPathFactory, real_model: Path) -> Path:
    """An embedding GGUF (the real model's file with mean pooling in its metadata, as embedding
    GGUFs carry it), imported by the real CLI."""
    tmp = tmp_path_factory.mktemp("gguf-embed")
    source = with_pooling(real_model / "model.gguf", tmp / "smollm2-embed.gguf")
    for model_id in (GGUF_EMBED, GGUF_EMBED_MLX):
        added = subprocess.run([sys.executable, "-m", "skulk.scripts.cli", "model", "add", str(source),
                                "--id", model_id, "--home", str(tmp)], capture_output=True, text=True,
                               timeout=patience(120))
        assert added.returncode == 0, added.stderr
    return tmp / "models" / GGUF_EMBED_DIR


@pytest.fixture(scope="module")
def bert_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two random BERT-style embedding GGUFs with a WordPiece vocabulary trained here on a fixed
    text (`spm_corpus.txt`), imported by the real CLI: lower-cased (llama.cpp's default for such a
    vocabulary) and cased (`tokenizer.ggml.normalizer.lowercase` false: tokenized only)."""
    import gguf

    tmp = tmp_path_factory.mktemp("bert")
    tokenizer = wordpiece_tokenizer([Path(__file__).with_name("spm_corpus.txt")], tmp / "wordpiece.json")
    cased = json.loads(tokenizer.read_text()) + [{"name": "tokenizer.ggml.normalizer.lowercase",
                                                  "types": [int(gguf.GGUFValueType.BOOL)], "value": False}]
    (tmp / "wordpiece-cased.json").write_text(json.dumps(cased))
    models = {}
    for model_id, keys in ((BERT, "wordpiece.json"), (BERT_CASED, "wordpiece-cased.json")):
        made = tmp / f"{model_id.split('/')[1]}.gguf"
        subprocess.run([sys.executable, "-m", "tools.random_gguf", "make", str(tmp / keys), str(made), *BERT_SHAPE],
                       check=True, capture_output=True, timeout=patience(60))
        added = subprocess.run([sys.executable, "-m", "skulk.scripts.cli", "model", "add", str(made), "--id", model_id,
                                "--home", str(tmp)], capture_output=True, text=True, timeout=patience(120))
        assert added.returncode == 0, added.stderr
        models[model_id] = tmp / "models" / model_id.replace("/", "--")
    return models


@pytest.fixture(scope="module")
def serving(module_nodes, demo_model, demo_embed_model, gguf_embed_model, bert_models):
    """One node for the file: its tests only read what it serves."""
    node = module_nodes(args=("--place", MODEL, "--place", EMBED_MODEL, "--place", GGUF_EMBED, "--place", BERT),
                        models={DEMO_DIR: demo_model, EMBED_DIR: demo_embed_model,
                                GGUF_EMBED_DIR: gguf_embed_model,
                                GGUF_EMBED_MLX_DIR: gguf_embed_model.parent / GGUF_EMBED_MLX_DIR,
                                BERT.replace("/", "--"): bert_models[BERT]})
    status, placed = http_json(f"{node.url}/place_instance", {"model_id": GGUF_EMBED_MLX, "engine": "mlx"})
    assert status == 200, placed
    wait_until(node, lambda: len(ready_runners(node)) >= 5, 90, "the five runners ready")
    return node


def norm(v: list[float]) -> float:
    return math.sqrt(sum(x * x for x in v))


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / (norm(a) * norm(b))


def test_openai_sdk_embeddings(serving):
    c = openai.OpenAI(base_url=f"{serving.url}/v1", api_key="none", max_retries=0, timeout=60)
    one = c.embeddings.create(model=EMBED_MODEL, input=TEXTS[0])  # the SDK asks for base64 and decodes it
    assert one.object == "list" and one.model == EMBED_MODEL and len(one.data) == 1
    assert one.data[0].object == "embedding" and one.data[0].index == 0
    v = one.data[0].embedding
    assert len(v) == WIDTH and abs(norm(v) - 1.0) < 1e-5
    assert one.usage.prompt_tokens > 0 and one.usage.total_tokens == one.usage.prompt_tokens
    again = c.embeddings.create(model=EMBED_MODEL, input=TEXTS[0]).data[0].embedding
    assert again == v  # deterministic: the same input gives the same vector

    batch = c.embeddings.create(model=EMBED_MODEL, input=TEXTS, encoding_format="float")
    assert [d.index for d in batch.data] == [0, 1, 2]
    vs = [d.embedding for d in batch.data]
    assert all(len(x) == WIDTH and abs(norm(x) - 1.0) < 1e-5 for x in vs)
    assert max(abs(a - b) for a, b in zip(vs[0], v)) < 1e-5  # batched or alone: the same vector
    assert cosine(vs[0], vs[1]) < 0.999 and cosine(vs[1], vs[2]) < 0.999  # different inputs differ
    assert batch.usage.prompt_tokens > one.usage.prompt_tokens

    raw = c.embeddings.create(model=EMBED_MODEL, input=TEXTS, encoding_format="base64")
    for d, floats in zip(raw.data, vs, strict=True):
        decoded = base64.b64decode(d.embedding)  # the SDK leaves an explicitly asked base64 alone
        assert list(struct.unpack(f"<{WIDTH}f", decoded)) == floats  # bit for bit

    short = c.embeddings.create(model=EMBED_MODEL, input=TEXTS[0], dimensions=16,
                                encoding_format="float").data[0].embedding
    assert len(short) == 16 and abs(norm(short) - 1.0) < 1e-5

    with pytest.raises(openai.BadRequestError, match=f"Model {MODEL} is not an embedding model"):
        c.embeddings.create(model=MODEL, input="hi")
    with pytest.raises(openai.NotFoundError, match="No instance found for model nobody/none"):
        c.embeddings.create(model="nobody/none", input="hi")
    with pytest.raises(openai.BadRequestError, match="is an embedding model"):
        c.chat.completions.create(model=EMBED_MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4)


def test_bad_embedding_bodies_are_400s_in_the_envelope(serving):
    url = f"{serving.url}/v1/embeddings"
    for body in ({"model": EMBED_MODEL, "input": ""}, {"model": EMBED_MODEL, "input": []},
                 {"model": EMBED_MODEL, "input": "x", "encoding_format": "int8"},
                 {"model": EMBED_MODEL, "input": "x", "dimensions": WIDTH + 1}):
        status, err = http_json(url, body)
        assert status == 400 and err["error"]["code"] == 400, (body, err)
    status, listed = http_json(f"{serving.url}/v1/models")
    entry = next(m for m in listed["data"] if m["id"] == EMBED_MODEL)
    assert entry["tasks"] == ["TextEmbedding"] and "embedding" in entry["tags"]


def test_the_demo_embedding_model_is_deterministic(demo_embed_model, tmp_path):
    from skulk.scripts.demo_model import digest

    out = subprocess.run([sys.executable, "-m", "skulk.scripts.cli", "model", "demo", "--kind", "embedding",
                          "--home", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert digest(tmp_path / "models" / EMBED_DIR) == digest(demo_embed_model)


def serving_engines(node, model_id: str) -> list[str]:
    _, listed = http_json(f"{node.url}/v1/models")
    return next(m for m in listed["data"] if m["id"] == model_id)["serving_engines"]


def test_an_embedding_gguf_is_served_by_llama_cpp_with_llama_cpps_own_vectors(serving, gguf_embed_model):
    """On a CPU node an embedding GGUF runs on llama.cpp (the card offers both engines: its Q4_1
    layers have an MLX layout too), and each vector is the one llama.cpp's own `embed` gives for
    the text on the same file, alone or in a batch, cut to `dimensions` as OpenAI cuts; placed on
    MLX, the file gives the same vectors up to llama.cpp's 8-bit activations."""
    readme = (gguf_embed_model / "README.md").read_text()
    assert "an embedding model: mean tokens pooling" in readme, readme
    _, listed = http_json(f"{serving.url}/v1/models")
    entry = next(m for m in listed["data"] if m["id"] == GGUF_EMBED)
    assert entry["tasks"] == ["TextEmbedding"] and entry["engines"] == ["mlx", "llama_cpp"], entry
    assert serving_engines(serving, GGUF_EMBED) == ["llama_cpp"]
    ref = json.loads(subprocess.run(
        [sys.executable, "-m", "tests.integration.reference_llama", str(gguf_embed_model / "model.gguf"), "0",
         json.dumps(TEXTS), "--embed"], check=True, capture_output=True, text=True, timeout=patience(120)).stdout)

    c = openai.OpenAI(base_url=f"{serving.url}/v1", api_key="none", max_retries=0, timeout=60)
    batch = [d.embedding for d in c.embeddings.create(model=GGUF_EMBED, input=TEXTS, encoding_format="float").data]
    alone = c.embeddings.create(model=GGUF_EMBED, input=TEXTS[1], encoding_format="float").data[0].embedding
    for got, want in [*zip(batch, ref, strict=True), (alone, ref[1])]:
        assert len(got) == len(want) == 576 and abs(norm(got) - 1.0) < 1e-5
        assert max(abs(a - b) for a, b in zip(got, want)) < 1e-4, cosine(got, want)  # float rounding at most
    assert cosine(batch[0], batch[1]) < 0.99  # different texts, different vectors
    short = c.embeddings.create(model=GGUF_EMBED, input=TEXTS[1], dimensions=64,
                                encoding_format="float").data[0].embedding
    cut = [x / norm(ref[1][:64]) for x in ref[1][:64]]
    assert len(short) == 64 and max(abs(a - b) for a, b in zip(short, cut)) < 1e-4

    # MLX serves the same file (its Q4_1 layers in mlx's layout, pooled as the file says): the same
    # vectors but for llama.cpp quantizing activations to 8 bits in its matmuls (cosine 0.9998 here)
    mlx = [d.embedding for d in c.embeddings.create(model=GGUF_EMBED_MLX, input=TEXTS, encoding_format="float").data]
    assert serving_engines(serving, GGUF_EMBED_MLX) == ["mlx"]
    assert all(cosine(got, want) > 0.999 for got, want in zip(mlx, ref, strict=True)), [
        cosine(got, want) for got, want in zip(mlx, ref)]

    # its context is cut to keep llama.cpp's per-token logits buffer within 512 MiB (2560 tokens
    # of this 49152-entry vocabulary): a longer input is refused at once, with the limit
    status, err = http_json(f"{serving.url}/v1/embeddings", {"model": GGUF_EMBED, "input": "word " * 3000})
    assert status == 400 and "takes at most 2560" in err["error"]["message"], err


WORDPIECE_TEXTS = ["Hello world", " a leading space", "Two  spaces and\nnew lines\n\n", "numbers 12345 and 3.14",
                   "unicode: café, naïve, 日本語, emoji 🎉", "Ünïcödé ÀÉÎÕÜ straße", "[CLS] hi [SEP] and [MASK]",
                   "UPPER lower MiXeD don't stop-me now!", "a$b+c<d=e>f^g`h|i~j", "tabs\tand\rreturns",
                   "page\x0cbreak and\x0bvertical", "spa\u093ecing mark", ""]


def test_a_bert_gguf_tokenizes_and_embeds_as_llama_cpp(serving, bert_models):
    """A WordPiece vocabulary (BERT's, as llama.cpp's converter writes it): the tokenizer the
    import builds encodes text (accents, case, punctuation, CJK, special tokens) to llama.cpp's ids,
    lower-cased or not as the file says; the encoder is served by llama.cpp alone, pooled on its
    first token, with llama.cpp's own vectors and token counts."""
    import llama_cpp
    from transformers import AutoTokenizer

    counts = {}
    for model_id, model_dir in bert_models.items():
        tok = AutoTokenizer.from_pretrained(str(model_dir))
        vocab = llama_cpp.Llama(str(model_dir / "model.gguf"), vocab_only=True, verbose=False)
        for text in WORDPIECE_TEXTS:
            ids = vocab.tokenize(text.encode(), add_bos=True, special=True)
            assert tok.encode(text) == ids, (model_id, text)
            counts.setdefault(model_id, []).append(len(vocab.tokenize(text.encode(), add_bos=True, special=False)))
    upper = AutoTokenizer.from_pretrained(str(bert_models[BERT_CASED])).encode("UPPER lower")
    assert upper != AutoTokenizer.from_pretrained(str(bert_models[BERT])).encode("UPPER lower")  # case kept

    model_dir = bert_models[BERT]
    assert "no MLX layout here for the bert architecture" in (model_dir / "README.md").read_text()
    _, listed = http_json(f"{serving.url}/v1/models")
    entry = next(m for m in listed["data"] if m["id"] == BERT)
    assert entry["tasks"] == ["TextEmbedding"] and entry["engines"] == ["llama_cpp"], entry
    texts = [t for t in WORDPIECE_TEXTS if t]
    ref = json.loads(subprocess.run(
        [sys.executable, "-m", "tests.integration.reference_llama", str(model_dir / "model.gguf"), "0",
         json.dumps(texts), "--embed"], check=True, capture_output=True, text=True, timeout=patience(120)).stdout)
    c = openai.OpenAI(base_url=f"{serving.url}/v1", api_key="none", max_retries=0, timeout=60)
    got = c.embeddings.create(model=BERT, input=texts, encoding_format="float")
    for vector, want in zip((d.embedding for d in got.data), ref, strict=True):
        assert len(vector) == 64 and max(abs(a - b) for a, b in zip(vector, want)) < 1e-4, cosine(vector, want)
    assert cosine(got.data[0].embedding, got.data[1].embedding) < 0.99  # different texts, different vectors
    assert got.usage.prompt_tokens == sum(n for t, n in zip(WORDPIECE_TEXTS, counts[BERT]) if t)
    status, err = http_json(f"{serving.url}/v1/embeddings", {"model": BERT, "input": "hello " * 600})
    assert status == 400 and "takes at most 512" in err["error"]["message"], err  # BERT's own context


def test_an_embedding_runner_embeds_on_its_share_of_the_cores_while_another_runner_steps(gguf_embed_model, tmp_path):
    """The llama.cpp embedding engine takes its share of the machine's cores for a group while
    another runner steps (`core_share.py`), gives them back when the group is done, and its vectors
    do not depend on its threads (beyond float rounding)."""
    from skulk.services.runner.core_share import CoreShare
    from skulk.services.runner.llamacpp.embed import LlamaEmbedEngine

    engine = LlamaEmbedEngine(gguf_embed_model, n_threads=4)
    engine.share = CoreShare(4, 4, directory=tmp_path)  # as on a 4-core machine, the runner's threads its most
    engine.load()
    assert "shared with the runners stepping at once" in engine.path
    other = CoreShare(4, directory=tmp_path)  # another runner, stepping
    assert other.busy(0.0) == 4
    prompts = [engine.encode(t) for t in TEXTS]
    beside = engine.embed(prompts, 0)
    assert engine.stepping_threads == 2
    assert other.busy(10.0) == 4  # the group done, the embedding runner no longer counts as busy
    other.idle()
    alone = engine.embed(prompts, 0)
    assert engine.stepping_threads == 4
    for a, b in zip(beside, alone, strict=True):
        va, vb = struct.unpack(f"<{len(a) // 4}f", a), struct.unpack(f"<{len(b) // 4}f", b)
        assert max(abs(x - y) for x, y in zip(va, vb)) < 1e-4
