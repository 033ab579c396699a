"""A run handed to transformers and back with nothing to know: for every kind of run `export`
accepts (characters or BPE, names or text, GPT-2- or Llama-style, grouped-query attention),
transformers' generate(tokenizer(prompt)), `sample --hf EXPORT` and `sample RUN` give the same
greedy text, the export's tokenizer starting a prompt where the run does (a line run's start
token), and the export carries the run's dropout as trained."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from tiny_run import tiny

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from scratchformer.cli.main import main  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TEXT = (
    "the cat sat on the mat and the dog ran to the log.\nA cat and a dog sat on the log; "
    "the mat was red and the log was wet.\n"
) * 30
STEPS = ["--max-steps", "12", "--eval-interval", "12", "--num-samples", "0", "--workers", "1"]
LLAMA = ["--positional", "rope", "--normalization", "rmsnorm", "--activation", "swiglu", "--no-bias"]
# run kind -> (its train options, the prompts it is sampled from)
KINDS = {
    "char-names": ([], ["em", "a", ""]),  # the default run: characters, lines, untied head, dropout 0.1
    "char-text": (["--data", "TEXT", "--bias", "--block-size", "32"], ["the c", "A dog"]),
    "bpe-names": (["--tokenizer", "bpe", "--vocab-size", "300"], ["em", ""]),
    "bpe-text": (
        ["--data", "TEXT", "--tokenizer", "bpe", "--vocab-size", "300", "--bias", "--block-size", "32"],
        ["the cat", "A dog sat"],
    ),
    "llama-char-names": ([*LLAMA, "--dropout", "0.1"], ["em", ""]),
    "llama-gqa-bpe-text": (
        ["--data", "TEXT", "--tokenizer", "bpe", "--vocab-size", "300", "--block-size", "32", *LLAMA]
        + ["--n-kv-head", "1"],
        ["the cat", "A"],
    ),
}
NEW = 8


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """kind -> (run directory, its export)."""
    root = tmp_path_factory.mktemp("handoff")
    (root / "text.txt").write_text(TEXT, encoding="utf-8")
    out = {}
    for kind, (options, _) in KINDS.items():
        options = [str(root / "text.txt") if o == "TEXT" else o for o in options]
        run, hf = root / kind, root / f"{kind}-hf"
        assert main(["train", *options, *tiny(), *STEPS, "--out", str(run)]) == 0
        assert main(["export", str(run), "--hf", str(hf)]) == 0
        out[kind] = run, hf
    return out


def _sample(capsys, *argv) -> str:
    """The one greedy sample `scratchformer sample ...` prints (without its header line)."""
    capsys.readouterr()
    assert main(["sample", *argv, "--temperature", "0", "-n", "1", "--max-new-tokens", str(NEW)]) == 0
    lines = capsys.readouterr().out.split("\n")
    if lines[0].startswith("=== sample"):  # a text run's or --hf's header line
        lines = lines[1:]
    return "\n".join(lines).removesuffix("\n")


@pytest.mark.parametrize("kind", KINDS)
def test_three_routes_give_the_same_greedy_text(exported, capsys, kind):
    run, hf = exported[kind]
    tok = transformers.AutoTokenizer.from_pretrained(hf)
    model = transformers.AutoModelForCausalLM.from_pretrained(hf).eval()
    for prompt in KINDS[kind][1]:
        ours = _sample(capsys, str(run), "--prompt", prompt)
        assert _sample(capsys, "--hf", str(hf), "--prompt", prompt) == ours, (kind, prompt)
        enc = tok(prompt, return_tensors="pt")
        with torch.no_grad():
            out = model.generate(**enc, do_sample=False, max_new_tokens=NEW, pad_token_id=tok.eos_token_id)
        assert tok.decode(out[0], skip_special_tokens=True) == ours, (kind, prompt)


def test_a_line_run_starts_its_prompt_with_its_start_token(exported):
    """The names run's sample starts from its boundary token: so does tokenizer(prompt) on the
    export, once (a prompt that writes the token out does not get it twice)."""
    for kind, start in [("char-names", "<eot>"), ("bpe-names", "<|endoftext|>")]:
        tok = transformers.AutoTokenizer.from_pretrained(exported[kind][1])
        first = tok.convert_tokens_to_ids(start)
        assert tok("em")["input_ids"][0] == first and tok("em")["input_ids"].count(first) == 1
        assert tok.bos_token == tok.eos_token == start
        cfg = json.loads((exported[kind][1] / "config.json").read_text())
        assert cfg["bos_token_id"] == cfg["eos_token_id"] == first
    for kind in ("char-text", "bpe-text"):  # a text run has no start token
        tok = transformers.AutoTokenizer.from_pretrained(exported[kind][1])
        assert tok("the cat")["input_ids"] == tok("the cat", add_special_tokens=False)["input_ids"]


def test_dropout_is_exported_as_trained(exported, capsys):
    cfg = {kind: json.loads((hf / "config.json").read_text()) for kind, (_, hf) in exported.items()}
    assert cfg["char-names"]["resid_pdrop"] == cfg["char-names"]["attn_pdrop"] == 0.1  # the names row's
    assert cfg["char-names"]["embd_pdrop"] == 0.1 and cfg["bpe-text"]["resid_pdrop"] == 0.0
    assert cfg["llama-char-names"]["attention_dropout"] == 0.1
    assert cfg["llama-gqa-bpe-text"]["attention_dropout"] == 0.0
    model = transformers.AutoModelForCausalLM.from_pretrained(exported["llama-char-names"][1])
    assert model.config.attention_dropout == 0.1
    # and the export says, in one line, where transformers' dropout differs from the run's
    run, _ = exported["llama-char-names"]
    capsys.readouterr()
    assert main(["export", str(run), "--hf", str(run.parent / "again")]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "dropout 0.1" in err[0] and "the attention weights only" in err[0]


def test_the_export_reads_back_into_a_run_of_the_same_logits(exported):
    from scratchformer.interop.hf_lm import load_hf_causal_lm
    from scratchformer.nn import eval_mode
    from scratchformer.training.jobs import load_job

    for kind, (run, hf) in exported.items():
        job = load_job(run)
        model, tokenizer = load_hf_causal_lm(hf)
        ids = tokenizer.encode_prompt(KINDS[kind][1][0])[None, :]
        with eval_mode(job.model), eval_mode(model):
            np.testing.assert_array_equal(model(ids)[0], job.model(ids)[0], err_msg=kind)


@pytest.mark.parametrize("kind", ["char-names", "bpe-names", "llama-gqa-bpe-text"])
def test_models_in_memory_equal_the_directory_route(exported, kind):
    from scratchformer.interop.hf_lm import load_hf_causal_lm
    from scratchformer.interop.in_memory import from_transformers, to_transformers
    from scratchformer.training.jobs import load_job

    run, hf_dir = exported[kind]
    job = load_job(run)
    hf_model, hf_tok = to_transformers(job.model, job.tokenizer)
    on_disk = transformers.AutoModelForCausalLM.from_pretrained(hf_dir).eval()
    disk_tok = transformers.AutoTokenizer.from_pretrained(hf_dir)
    assert type(hf_model) is type(on_disk) and type(hf_tok) is type(disk_tok)
    assert hf_model.config.to_dict() | {"_name_or_path": ""} == on_disk.config.to_dict() | {
        "_name_or_path": ""
    }
    disk_state = on_disk.state_dict()
    assert all(torch.equal(v, disk_state[k]) for k, v in hf_model.state_dict().items())
    assert hf_model.state_dict().keys() == disk_state.keys()
    for prompt in KINDS[kind][1]:
        enc = hf_tok(prompt, return_tensors="pt")
        assert enc["input_ids"].tolist() == disk_tok(prompt, return_tensors="pt")["input_ids"].tolist()
        with (
            torch.no_grad()
        ):  # the same weights; a file's tensors are aligned otherwise: float32 rounding apart
            ours, theirs = hf_model(**enc).logits, on_disk(**enc).logits
            assert (ours - theirs).abs().max() <= 1e-6 * theirs.abs().max()
            a = hf_model.generate(
                **enc, do_sample=False, max_new_tokens=NEW, pad_token_id=hf_tok.eos_token_id
            )
            b = on_disk.generate(
                **enc, do_sample=False, max_new_tokens=NEW, pad_token_id=disk_tok.eos_token_id
            )
        assert torch.equal(a, b) and hf_tok.decode(a[0], skip_special_tokens=True) == disk_tok.decode(
            b[0], skip_special_tokens=True
        )
    # and back: what load_hf_causal_lm reads from the directory
    model, tokenizer = from_transformers(on_disk, disk_tok)
    want, want_tok = load_hf_causal_lm(hf_dir)
    assert model.config == want.config and tokenizer.stop_ids == want_tok.stop_ids
    assert all(np.array_equal(v, want.state_dict()[k]) for k, v in model.state_dict().items())
    for prompt in KINDS[kind][1]:
        assert tokenizer.encode_prompt(prompt).tolist() == want_tok.encode_prompt(prompt).tolist()


def test_the_in_memory_functions_import_torch_only_when_called():
    import subprocess
    import sys

    code = "import sys, scratchformer.interop.in_memory; print('torch' in sys.modules, 'transformers' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["False", "False"], done.stderr


def test_the_handoff_numbers_script_measures_what_the_docs_say():
    """scripts/handoff_numbers.py, behind docs/operations.md's hand-off: each effect is there."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "scripts" / "handoff_numbers.py"
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    numbers = lambda pattern: [float(x) for x in re.findall(pattern, out)]  # noqa: E731
    gpt2, llama = numbers(r"export in transformers: logits within (\S+) of")
    assert gpt2 < 1e-12 < 1e-9 < llama < 1e-6  # float64 throughout; float32 norms and rotary tables
    assert "from_pretrained without dtype: torch.bfloat16" in out
    assert numbers(r"its logits are (\S+) from float32")[0] > 0.01
    for grad, key, query in re.findall(
        r"at most (\S+); one step \(lr 0.001\) moves it by up to (\S+) \(the query bias: (\S+)\)", out
    ):
        assert float(grad) < 1e-6 and float(key) > 100 * float(grad) and float(query) > 5e-4
