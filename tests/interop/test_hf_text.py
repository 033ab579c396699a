"""Text from Hugging Face directories exactly as transformers gives it (`sample --hf`).

Three tokenizer styles, each in a tiny random directory built here (no hub): GPT-2 (vocab.json +
merges.txt), Llama-3 (a byte-level tokenizer.json whose post-processor adds <|begin_of_text|>)
and Llama-2 (a SentencePiece-style tokenizer.json: Metaspace pre-tokenizer and decoder, byte
fallback, <s> added by the post-processor). For prompts with leading spaces, unicode, newlines
and the literal text <|endoftext|>, greedy ids and text must equal transformers' tokenizer(prompt),
generate(do_sample=False) and decode of the whole sequence; and a bfloat16 copy of a Llama
directory must give transformers' tokens from the same bf16 weights read as float32.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from scratchformer.data.datasets import resolve_data  # noqa: E402
from scratchformer.interop.hf_lm import hf_generate, hf_samples, load_hf_causal_lm  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

LINES = resolve_data("shakespeare").read_text(encoding="utf-8").split("\n")[:3000]
LINES += ["café naïve — “quoted” 日本語 😀"] * 3
PROMPTS = [
    "my lord",
    "  two leading spaces",
    "café — 日本語 😀",
    "First line\nSecond",
    "<|endoftext|>ROMEO:",
    "the <|endoftext|> marker",
    " ",
    "",
]
NEW = 16
LLAMA = dict(
    hidden_size=32,
    num_attention_heads=4,
    num_key_value_heads=2,
    num_hidden_layers=2,
    intermediate_size=48,
    max_position_embeddings=128,
)


def _random_weights(model, seed):
    """Weights larger than the 0.02 init (logits far from ties, so float32 greedy choices agree)."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):  # small: a large final-norm bias favours one token at every step
                p.normal_(0.0, 0.05)
            elif name.endswith("norm.weight") or ".ln_" in name:
                p.normal_(1.0, 0.2)
            else:
                p.normal_(0.0, 0.3)
    return model.eval()


def _bpe_trainer(special, **extra):
    return tokenizers.trainers.BpeTrainer(
        vocab_size=420, special_tokens=special, show_progress=False, **extra
    )


def _gpt2_tokenizer(path):
    """GPT-2's files: a byte-level BPE saved as vocab.json + merges.txt, <|endoftext|> its last id."""
    hf = tokenizers
    tok = hf.Tokenizer(hf.models.BPE())
    tok.pre_tokenizer = hf.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = hf.decoders.ByteLevel()
    tok.train_from_iterator(
        LINES, trainer=_bpe_trainer([], initial_alphabet=hf.pre_tokenizers.ByteLevel.alphabet())
    )
    vocab = tok.get_vocab()
    vocab["<|endoftext|>"] = len(vocab)
    tok.model.save(str(path))
    (path / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (path / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "GPT2Tokenizer",
                "bos_token": "<|endoftext|>",
                "eos_token": "<|endoftext|>",
                "unk_token": "<|endoftext|>",
                "add_prefix_space": False,
            }
        )
    )
    return len(vocab), {"bos_token_id": vocab["<|endoftext|>"], "eos_token_id": vocab["<|endoftext|>"]}


def _llama3_tokenizer(path):
    """Llama 3's style: byte-level BPE in tokenizer.json; the post-processor adds <|begin_of_text|>."""
    hf = tokenizers
    tok = hf.Tokenizer(hf.models.BPE())
    tok.pre_tokenizer = hf.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = hf.decoders.ByteLevel()
    tok.train_from_iterator(
        LINES,
        trainer=_bpe_trainer(
            ["<|begin_of_text|>", "<|end_of_text|>"], initial_alphabet=hf.pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    bos, eos = tok.token_to_id("<|begin_of_text|>"), tok.token_to_id("<|end_of_text|>")
    tok.post_processor = hf.processors.TemplateProcessing(
        single="<|begin_of_text|> $A",
        pair="<|begin_of_text|> $A <|begin_of_text|> $B",
        special_tokens=[("<|begin_of_text|>", bos)],
    )
    tok.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": "<|begin_of_text|>",
                "eos_token": "<|end_of_text|>",
            }
        )
    )
    return tok.get_vocab_size(), {"bos_token_id": bos, "eos_token_id": eos}


def _llama2_tokenizer(path):
    """Llama 2's style: SentencePiece-like BPE ("▁" for spaces, a Metaspace pre-tokenizer and
    decoder), byte-fallback tokens <0x00>..<0xFF> for characters outside the vocabulary, and <s>
    added by the post-processor."""
    hf = tokenizers
    tok = hf.Tokenizer(hf.models.BPE(unk_token="<unk>", byte_fallback=True))
    tok.pre_tokenizer = hf.pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tok.train_from_iterator(
        [line for line in LINES if "日" not in line],  # those characters: bytes
        trainer=_bpe_trainer(["<unk>", "<s>", "</s>"]),
    )
    spec = json.loads(tok.to_str())
    learned = sorted(spec["model"]["vocab"].items(), key=lambda kv: kv[1])[3:]  # after the three special ids
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"<0x{b:02X}>": 3 + b for b in range(256)}}
    vocab.update({t: len(vocab) + i for i, (t, _) in enumerate(learned)})
    spec["model"]["vocab"] = vocab
    tok = hf.Tokenizer.from_str(json.dumps(spec))
    tok.decoder = hf.decoders.Sequence(
        [
            hf.decoders.ByteFallback(),  # <0xE6><0x97><0xA5> -> 日
            hf.decoders.Metaspace(replacement="▁", prepend_scheme="first"),
        ]
    )
    tok.post_processor = hf.processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)]
    )
    tok.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "LlamaTokenizerFast",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "unk_token": "<unk>",
                "add_bos_token": True,
                "add_eos_token": False,
            }
        )
    )  # as Llama 2's own tokenizer_config.json
    return tok.get_vocab_size(), {"bos_token_id": 1, "eos_token_id": 2}


def _make_dir(path, style, seed=0, dtype=None, pad_vocab=0):
    """A tiny random model of `style` ("gpt2", "llama3", "llama2") saved by transformers, with its tokenizer."""
    path.mkdir(parents=True, exist_ok=True)
    make_tokenizer = {"gpt2": _gpt2_tokenizer, "llama3": _llama3_tokenizer, "llama2": _llama2_tokenizer}[
        style
    ]
    n_vocab, ids = make_tokenizer(path)
    if style == "gpt2":
        cfg = transformers.GPT2Config(
            n_layer=2,
            n_head=2,
            n_embd=32,
            vocab_size=n_vocab + pad_vocab,
            n_positions=128,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            **ids,
        )
        model = transformers.GPT2LMHeadModel(cfg)
    else:
        cfg = transformers.LlamaConfig(vocab_size=n_vocab + pad_vocab, **LLAMA, **ids)
        model = transformers.LlamaForCausalLM(cfg)
    model = _random_weights(model, seed)
    if dtype is not None:
        model = model.to(dtype)
    model.save_pretrained(path, safe_serialization=True)
    return path


@pytest.fixture(scope="module", params=["gpt2", "llama3", "llama2"])
def hf_dir(request, tmp_path_factory):
    return _make_dir(tmp_path_factory.mktemp(request.param), request.param)


def _reference(path, prompt, new=NEW, dtype=torch.float32):
    """transformers' greedy continuation: (start ids, new ids up to the end token, the text as
    printed: the prompt, then the whole sequence's decode past the decoded start)."""
    tok = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval()
    start = tok(prompt)["input_ids"]
    if len(start) > 1 and tok.bos_token_id is not None and start[:2] == [tok.bos_token_id] * 2:
        start = start[1:]  # a prompt written with its start token: scratchformer does not double it
    if not start:  # GPT-2 with an empty prompt starts from <|endoftext|>
        start = [tok.eos_token_id]
    with torch.no_grad():
        out = model.generate(
            torch.tensor([start]),
            attention_mask=torch.ones(1, len(start), dtype=torch.long),
            max_new_tokens=new,
            do_sample=False,
        )[0].tolist()
    new_ids = out[len(start) :]
    if model.generation_config.eos_token_id in new_ids:
        new_ids = new_ids[: new_ids.index(model.generation_config.eos_token_id)]
    whole, head = tok.decode(out, skip_special_tokens=True), tok.decode(start, skip_special_tokens=True)
    if not whole.startswith(head):  # byte-fallback tokens of the prompt's last character merged with new ones
        return start, new_ids, prompt + tok.decode(new_ids, skip_special_tokens=True)
    return start, new_ids, prompt + whole[len(head) :]


def test_greedy_ids_and_text_equal_transformers(hf_dir):
    model, tokenizer = load_hf_causal_lm(hf_dir)
    varied = set()
    for prompt in PROMPTS:
        start, new_ids, text = _reference(hf_dir, prompt)
        ours_start, ours_new = hf_generate(model, tokenizer, prompt, n=1, max_new_tokens=NEW, temperature=0)
        assert ours_start.tolist() == start, prompt
        assert ours_new[0].tolist() == new_ids, prompt
        assert hf_samples(model, tokenizer, prompt, n=1, max_new_tokens=NEW, temperature=0) == [text], prompt
        varied.update(new_ids)
    assert len(varied) > 10  # a model that says one thing would compare nothing


def test_start_token_as_the_post_processor_adds_it(tmp_path):
    """Llama's start token is added once: never missing, never doubled when written out."""
    path = _make_dir(tmp_path / "l2", "llama2")
    _, tokenizer = load_hf_causal_lm(path)
    ref = transformers.AutoTokenizer.from_pretrained(path)
    assert tokenizer.encode_prompt("my lord").tolist() == ref("my lord")["input_ids"]
    assert ref("my lord")["input_ids"][0] == 1
    doubled = ref("<s>my lord")["input_ids"]
    assert doubled[:2] == [1, 1]  # what transformers' tokenizer gives
    assert tokenizer.encode_prompt("<s>my lord").tolist() == doubled[1:]
    assert tokenizer.encode_prompt("").tolist() == [1]


def test_metaspace_continuation_keeps_its_space(tmp_path):
    """The planted bug: the new ids decoded alone lose the space a Metaspace decoder strips
    from a first token; decoded after the prompt they keep it."""
    path = _make_dir(tmp_path / "l2", "llama2")
    _, tokenizer = load_hf_causal_lm(path)
    ids = tokenizer.encode_prompt("my lord brave")
    tokens = tokenizer._tok.encode("my lord brave").tokens  # <s> first, as in ids
    assert tokens[0] == "<s>" and len(tokens) == len(ids)
    cut = int(np.flatnonzero([t.startswith("▁") for t in tokens])[-1])  # where " brave" starts
    assert tokenizer.decode(ids[cut:]) == "brave"  # what the printed text lost
    assert tokenizer.decode_continuation(ids[:cut], ids[cut:]) == " brave"


def test_sample_hf_command_prints_transformers_text(hf_dir, capsys):
    from scratchformer.cli.main import main

    prompt = "  my lord\nsay: café"
    _, _, text = _reference(hf_dir, prompt)
    assert (
        main(
            [
                "sample",
                "--hf",
                str(hf_dir),
                "--prompt",
                prompt,
                "-n",
                "1",
                "--max-new-tokens",
                str(NEW),
                "--temperature",
                "0",
                "--seed",
                "1",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert out == f"=== sample 1 of 1 ===\n{text}\n"


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_llama_directory(tmp_path, capsys, dtype):
    """The dtype most Llama checkpoints ship in: read as float32, same greedy tokens as
    transformers in float32 from the same weights, and said in one line."""
    from scratchformer.cli.main import main

    path = _make_dir(tmp_path / "bf16", "llama3", seed=1, dtype=getattr(torch, dtype))
    from safetensors import safe_open

    with safe_open(str(path / "model.safetensors"), "pt") as f:
        assert f.get_tensor("model.norm.weight").dtype == getattr(torch, dtype)
    model, tokenizer = load_hf_causal_lm(path)
    assert model.config.dtype == "float32"
    for prompt in ["my lord", "café\n"]:
        start, new_ids, text = _reference(path, prompt, dtype=torch.float32)
        ours_start, ours_new = hf_generate(model, tokenizer, prompt, max_new_tokens=NEW, temperature=0)
        assert ours_start.tolist() == start and ours_new[0].tolist() == new_ids
    capsys.readouterr()  # transformers' progress bars
    assert (
        main(
            [
                "sample",
                "--hf",
                str(path),
                "--prompt",
                "my lord",
                "-n",
                "1",
                "--max-new-tokens",
                "4",
                "--temperature",
                "0",
                "--seed",
                "1",
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert f"holds {dtype} weights, read as float32" in err and len(err.strip().splitlines()) == 1


def test_padded_vocabulary_never_samples_past_the_tokenizer(tmp_path, capsys):
    """nanoGPT pads GPT-2's embedding to 50,304 rows; here 40 rows past the tokenizer, made the
    most likely tokens, so an unmasked sampler would pick them at every step."""
    from safetensors.numpy import load_file, save_file

    from scratchformer.cli.main import main

    path = _make_dir(tmp_path / "padded", "gpt2", pad_vocab=40)
    tensors = load_file(str(path / "model.safetensors"))
    wte = tensors["transformer.wte.weight"]
    n_tok = wte.shape[0] - 40
    wte[n_tok:] = 5.0 * wte[:40]  # padding rows whose logits dwarf the real ones
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    model, tokenizer = load_hf_causal_lm(path)
    assert model.config.vocab_size == tokenizer.vocab_size == n_tok
    for temperature in (0, 1.0):
        _, news = hf_generate(
            model, tokenizer, "my lord", n=8, max_new_tokens=12, temperature=temperature, rng=0
        )
        assert all(new.max(initial=0) < n_tok for new in news)
    assert (
        main(
            [
                "sample",
                "--hf",
                str(path),
                "--prompt",
                "my lord",
                "-n",
                "2",
                "--max-new-tokens",
                "8",
                "--seed",
                "1",
            ]
        )
        == 0
    )
    captured = capsys.readouterr()
    assert "40 rows no text uses are dropped" in captured.err
    assert captured.out.count("my lord") == 2


# -- export: GPT-2 or Llama layout, chosen by what the model is; bos/eos ids in config.json ----

TINY_RUN = [
    "--format",
    "text",
    "--tokenizer",
    "bpe",
    "--vocab-size",
    "300",
    "--block-size",
    "32",
    "--n-layer",
    "1",
    "--n-embd",
    "16",
    "--n-head",
    "2",
    "--max-steps",
    "2",
    "--eval-interval",
    "2",
    "--eval-batches",
    "1",
    "--batch-size",
    "4",
    "--no-progress",
    "--quiet",
    "--workers",
    "1",
    "--num-samples",
    "0",
]
LLAMA_RUN = [
    "--positional",
    "rope",
    "--normalization",
    "rmsnorm",
    "--activation",
    "swiglu",
    "--no-bias",
    "--n-kv-head",
    "1",
]


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "plays.txt"
    path.write_text("\n".join(LINES[:600]), encoding="utf-8")
    return path


def _train(out, *argv):
    from scratchformer.cli.main import main

    assert main(["train", *map(str, argv), "--out", str(out)]) == 0
    return out


def _logits_equal(run, hf_path, text="First Citizen:\nBefore we proceed"):
    from scratchformer.nn import eval_mode
    from scratchformer.training.jobs import load_job

    job = load_job(run)
    ids = job.tokenizer.encode(text)[None, :]
    with eval_mode(job.model):
        ours, _ = job.model(ids)
    hf = transformers.AutoModelForCausalLM.from_pretrained(hf_path).eval()
    with torch.no_grad():
        theirs = hf(torch.tensor(ids)).logits.numpy()
    np.testing.assert_allclose(theirs, ours, rtol=1e-4, atol=1e-5)
    return type(hf).__name__


def _stops_at_eos(path, capfd):
    """transformers' generate on an exported directory, its end token forced at the first step:
    (new tokens, whether the last is the end token, stderr). It stops there, warning nothing,
    only when the directory's configs name the end token."""
    eos = json.loads((path / "config.json").read_text())["eos_token_id"]

    class ForceEnd(transformers.LogitsProcessor):
        def __call__(self, input_ids, scores):
            scores[:, eos] = scores.max() + 100.0
            return scores

    tok = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.AutoModelForCausalLM.from_pretrained(path).eval()
    enc = tok("First Citizen", return_tensors="pt")
    capfd.readouterr()
    with torch.no_grad():
        out = model.generate(
            **enc,
            max_new_tokens=10,
            do_sample=False,
            logits_processor=transformers.LogitsProcessorList([ForceEnd()]),
        )
    err = capfd.readouterr().err
    return out.shape[1] - enc["input_ids"].shape[1], out[0, -1].item() == eos, err


def test_export_llama_style_run(text_file, tmp_path, capfd):
    from scratchformer.cli.main import main

    run = _train(tmp_path / "run", "--data", text_file, *TINY_RUN, *LLAMA_RUN)
    out = tmp_path / "hf"
    capfd.readouterr()
    assert main(["export", str(run), "--hf", str(out)]) == 0
    assert "LlamaForCausalLM.from_pretrained" in capfd.readouterr().out
    assert _logits_equal(run, out) == "LlamaForCausalLM"
    cfg = json.loads((out / "config.json").read_text())
    tok = transformers.AutoTokenizer.from_pretrained(out)
    assert cfg["eos_token_id"] == cfg["bos_token_id"] == tok.convert_tokens_to_ids("<|endoftext|>")
    assert cfg["num_key_value_heads"] == 1
    n_new, ended, err = _stops_at_eos(out, capfd)
    assert ended and n_new == 1 and "warn" not in err.lower() and "pad_token" not in err
    # and scratchformer reads its own export back: same greedy text as transformers
    prompt = "First Citizen:\n"
    model, tokenizer = load_hf_causal_lm(out)
    start, new_ids, _ = _reference(out, prompt, new=8)
    assert hf_generate(model, tokenizer, prompt, max_new_tokens=8, temperature=0)[1][0].tolist() == new_ids


def test_export_gpt2_carries_end_token_ids(text_file, tmp_path, capfd):
    from scratchformer.cli.main import main

    run = _train(tmp_path / "run", "--data", text_file, *TINY_RUN, "--bias", "--tie-weights")
    out = tmp_path / "hf"
    assert main(["export", str(run), "--hf", str(out)]) == 0
    assert _logits_equal(run, out) == "GPT2LMHeadModel"
    cfg = json.loads((out / "config.json").read_text())
    gen = json.loads((out / "generation_config.json").read_text())
    tok = transformers.AutoTokenizer.from_pretrained(out)
    assert cfg["eos_token_id"] == cfg["bos_token_id"] == gen["eos_token_id"] == tok.eos_token_id
    assert tok.eos_token == "<|endoftext|>"
    n_new, ended, err = _stops_at_eos(out, capfd)
    assert ended and n_new == 1 and "warn" not in err.lower()


def test_export_refuses_a_model_no_layout_holds(text_file, tmp_path, capfd):
    """Learned positions and LayerNorm without biases: neither GPT-2 nor Llama; one line saying why."""
    from scratchformer.cli.main import main

    run = _train(tmp_path / "run", "--data", text_file, *TINY_RUN, "--no-bias")
    capfd.readouterr()
    assert main(["export", str(run), "--hf", str(tmp_path / "hf")]) == 2
    err = capfd.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert (
        "bias=False (GPT-2 has biases)" in err and "positional='learned' (Llama has positional='rope')" in err
    )
    assert not (tmp_path / "hf").exists()


def test_init_from_llama2_directory_and_export(tmp_path, text_file, capfd):
    """A Llama-2-style directory (Metaspace tokenizer.json adding <s>) trained on and written back:
    the export keeps the tokenizer, its start token and its end token."""
    from scratchformer.cli.main import main

    src = _make_dir(tmp_path / "src", "llama2")
    run = _train(
        tmp_path / "run",
        "--init-from",
        src,
        "--data",
        text_file,
        "--format",
        "text",
        "--block-size",
        "32",
        "--max-steps",
        "2",
        "--eval-interval",
        "2",
        "--eval-batches",
        "1",
        "--batch-size",
        "2",
        "--no-progress",
        "--workers",
        "1",
        "--num-samples",
        "1",
    )
    out = tmp_path / "hf"
    assert main(["export", str(run), "--hf", str(out)]) == 0
    assert _logits_equal(run, out) == "LlamaForCausalLM"
    cfg = json.loads((out / "config.json").read_text())
    assert (cfg["bos_token_id"], cfg["eos_token_id"]) == (1, 2)
    tok = transformers.AutoTokenizer.from_pretrained(out)
    assert tok("my lord")["input_ids"][0] == 1 and (tok.bos_token, tok.eos_token) == ("<s>", "</s>")


def test_init_from_a_padded_vocabulary(tmp_path, text_file, capfd):
    """nanoGPT's padded embedding: training from it works, its samples (printed while training)
    decode, and the export holds the tokenizer's rows."""
    from scratchformer.cli.main import main

    src = _make_dir(tmp_path / "src", "gpt2", pad_vocab=24)
    capfd.readouterr()
    run = _train(
        tmp_path / "run",
        "--init-from",
        src,
        "--data",
        text_file,
        "--format",
        "text",
        "--block-size",
        "32",
        "--max-steps",
        "1",
        "--eval-interval",
        "1",
        "--eval-batches",
        "1",
        "--batch-size",
        "2",
        "--no-progress",
        "--workers",
        "1",
        "--num-samples",
        "1",
    )
    assert "the 24 rows no text uses are dropped" in capfd.readouterr().err
    assert main(["sample", str(run), "-n", "3", "--max-new-tokens", "20", "--seed", "0"]) == 0
    assert main(["export", str(run), "--hf", str(tmp_path / "hf")]) == 0
    n_tok = transformers.AutoTokenizer.from_pretrained(src).vocab_size
    assert (
        json.loads((tmp_path / "hf/config.json").read_text())["vocab_size"]
        == len(transformers.AutoTokenizer.from_pretrained(tmp_path / "hf"))
        >= n_tok
    )


def test_hf_name_instead_of_a_directory_says_how_to_get_one(tmp_path, capfd):
    from scratchformer.cli.main import main

    capfd.readouterr()
    assert main(["sample", "--hf", "gpt2", "--prompt", "x"]) == 2
    err = capfd.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "gpt2: not a directory" in err and "save_pretrained" in err


def test_sharded_checkpoint_reads_as_one(tmp_path):
    """save_pretrained shards a large model (model.safetensors.index.json + pieces): same model."""
    path = _make_dir(tmp_path / "one", "llama3")
    model = transformers.AutoModelForCausalLM.from_pretrained(path)
    sharded = tmp_path / "sharded"
    model.save_pretrained(sharded, max_shard_size="40KB")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (sharded / name).write_bytes((path / name).read_bytes())
    assert (sharded / "model.safetensors.index.json").is_file() and not (
        sharded / "model.safetensors"
    ).exists()
    assert len(list(sharded.glob("model-*.safetensors"))) > 1
    a, _ = load_hf_causal_lm(path)
    b, _ = load_hf_causal_lm(sharded)
    assert a.config == b.config
    assert all(np.array_equal(v, b.state_dict()[k]) for k, v in a.state_dict().items())
    next(sharded.glob("model-*.safetensors")).unlink()
    from scratchformer.errors import CheckpointError

    with pytest.raises(CheckpointError, match="shard .* not found"):
        load_hf_causal_lm(sharded)


def test_safetensors_reader_converts_exactly_and_refuses_damage(tmp_path):
    from safetensors.torch import save_file

    from scratchformer.errors import CheckpointError
    from scratchformer.interop.hf_files import read_safetensors, safetensors_dtypes

    special = torch.tensor([0.0, -0.0, 1.0, -2.5, float("inf"), -float("inf"), 1e-40, 3.0e38, 1 / 3])
    tensors = {
        "bf16": torch.cat([special, torch.randn(40)]).to(torch.bfloat16).reshape(7, 7),
        "f16": torch.cat([special[:6], torch.randn(10)]).half(),
        "f64": torch.randn(3, dtype=torch.float64),
        "i64": torch.arange(5),
        "empty": torch.zeros(0, 4),
    }
    path = tmp_path / "model.safetensors"
    save_file(tensors, str(path))
    got = read_safetensors(path)
    assert safetensors_dtypes(path) == {"BF16", "F16", "F64", "I64", "F32"}
    for name, t in tensors.items():
        want = t.float().numpy() if t.dtype in (torch.bfloat16, torch.float16) else t.numpy()
        assert got[name].dtype == want.dtype and np.array_equal(got[name], want), name
    nan = torch.tensor([float("nan")]).to(torch.bfloat16)
    save_file({"nan": nan}, str(tmp_path / "nan.safetensors"))
    assert np.isnan(read_safetensors(tmp_path / "nan.safetensors")["nan"]).all()
    # damage: one line naming the file, never a traceback from a parser
    data = path.read_bytes()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + n])
    for label, damaged in [
        ("truncated", data[:-10]),
        ("short", data[:5]),
        ("huge header", (1 << 40).to_bytes(8, "little") + data[8:]),
        ("not json", data[:8] + b"\xff" * n + data[8 + n :]),
        ("unknown dtype", _with_header(data, {**header, "i64": {**header["i64"], "dtype": "F8_E4M3"}})),
        ("bad shape", _with_header(data, {**header, "i64": {**header["i64"], "shape": [6]}})),
    ]:
        bad = tmp_path / f"{label.replace(' ', '_')}.safetensors"
        bad.write_bytes(damaged)
        with pytest.raises(CheckpointError, match=f"cannot read {bad}") as e:
            read_safetensors(bad)
        assert "\n" not in str(e.value), label


def _with_header(data: bytes, header: dict) -> bytes:
    """`data` (a safetensors file) with its header replaced, padded to the old length."""
    n = int.from_bytes(data[:8], "little")
    text = json.dumps(header, separators=(",", ":")).encode()
    assert len(text) <= n
    return data[:8] + text.ljust(n) + data[8 + n :]
