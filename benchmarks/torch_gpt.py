"""nanoGPT's GPT in PyTorch, the reference the benchmarks compare scratchformer with.

Pre-norm blocks with a fused qkv projection and PyTorch's `scaled_dot_product_attention`,
exact GELU, tied head, GPT-2 init (N(0, 0.02), residual projections / sqrt(2 n_layer)).
`bias=False` is nanoGPT's shakespeare setting. `dropout`, `tie_weights=False` and
`init="pytorch"` (each layer's PyTorch default init, as makemore) give the default
`scratchformer train` model on names (benchmarks/torch_names_reference.py).
"""

from __future__ import annotations

import math

import torch
import torch.nn as tnn
import torch.nn.functional as F


class Block(tnn.Module):
    def __init__(self, C: int, H: int, bias: bool, dropout: float = 0.0):
        super().__init__()
        self.H, self.dropout = H, dropout
        self.drop = tnn.Dropout(dropout)
        self.ln_1, self.ln_2 = tnn.LayerNorm(C, bias=bias), tnn.LayerNorm(C, bias=bias)
        self.c_attn, self.c_proj = tnn.Linear(C, 3 * C, bias=bias), tnn.Linear(C, C, bias=bias)
        self.c_fc, self.mlp_proj = tnn.Linear(C, 4 * C, bias=bias), tnn.Linear(4 * C, C, bias=bias)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0
        )
        x = x + self.drop(self.c_proj(a.transpose(1, 2).reshape(B, T, C)))
        return x + self.drop(self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)))))


class TorchGPT(tnn.Module):
    def __init__(
        self,
        vocab_size: int,
        block_size: int,
        n_layer: int,
        n_head: int,
        n_embd: int,
        bias: bool = True,
        dropout: float = 0.0,
        tie_weights: bool = True,
        init: str = "gpt2",
    ):
        super().__init__()
        self.wte, self.wpe = tnn.Embedding(vocab_size, n_embd), tnn.Embedding(block_size, n_embd)
        self.drop = tnn.Dropout(dropout)
        self.h = tnn.ModuleList(Block(n_embd, n_head, bias, dropout) for _ in range(n_layer))
        self.ln_f = tnn.LayerNorm(n_embd, bias=bias)
        self.lm_head = None if tie_weights else tnn.Linear(n_embd, vocab_size, bias=False)
        if init == "pytorch":  # keep each layer's own default init
            return
        for name, p in self.named_parameters():
            if p.dim() == 2:
                resid = name.endswith(("c_proj.weight", "mlp_proj.weight"))
                tnn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * n_layer) if resid else 0.02)
            elif name.endswith("bias") and "ln" not in name:
                tnn.init.zeros_(p)

    def forward(self, idx, targets):
        """Mean cross-entropy of the next-token targets (-100, scratchformer.ops.IGNORE_INDEX, ignored)."""
        x = self.drop(self.wte(idx) + self.wpe(torch.arange(idx.shape[1])))
        for block in self.h:
            x = block(x)
        x = self.ln_f(x)
        logits = x @ self.wte.weight.T if self.lm_head is None else self.lm_head(x)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100)


def scratchformer_state(model: TorchGPT) -> dict:
    """This model's weights under scratchformer's GPT names (a bias-free model, bias=False).

    Both keep PyTorch's (out, in) layout and q|k|v row order, so no tensor is transposed.
    """
    if any(name.endswith("bias") for name, _ in model.named_parameters()):
        raise ValueError("scratchformer_state maps the bias-free model only (bias=False)")
    renames = {
        "ln_1.": "attn_norm.",
        "c_attn.weight": "self_attn.in_proj_weight",
        "c_proj.": "self_attn.out_proj.",
        "ln_2.": "ff_norm.",
        "c_fc.": "ff.fc1.",
        "mlp_proj.": "ff.fc2.",
    }
    state = {}
    for name, p in model.named_parameters():
        for theirs, ours in renames.items():
            name = name.replace(theirs, ours)
        state[name] = p.detach().numpy().copy()
    return state


def nanogpt_adamw(
    model: TorchGPT, lr: float, betas: tuple[float, float], weight_decay: float, decay_embeddings: bool = True
):
    """torch.optim.AdamW with nanoGPT's groups: every tensor with dim >= 2 decayed (embeddings
    too, unless decay_embeddings=False as scratchformer's default), the rest (LayerNorm
    weights, biases) not."""
    embeddings = set() if decay_embeddings else {id(model.wte.weight), id(model.wpe.weight)}
    decay = [p for p in model.parameters() if p.dim() >= 2 and id(p) not in embeddings]
    no_decay = [p for p in model.parameters() if p.dim() < 2 or id(p) in embeddings]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=lr,
        betas=betas,
    )


def train_steps(model: TorchGPT, opt, split, rng, steps: int, batch_size: int, lr_at) -> None:
    """The reference training loop: per step, lr_at(step), a batch from `split`, forward,
    backward, clipping at 1.0, AdamW."""
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        x, y = split.batch(rng, batch_size)
        loss = model(torch.from_numpy(x), torch.from_numpy(y))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()


def whole_split_loss(model: TorchGPT, split, batch_size: int = 64) -> tuple[float, int]:
    """(token-weighted mean loss, token count) over every window of a scratchformer data split,
    as `scratchformer eval` computes it (`LMJob.evaluate`)."""
    was_training = model.training
    model.eval()
    total = count = 0
    with torch.no_grad():
        for x, y in split.all_batches(batch_size):
            n = int((y != -1).sum())
            total += model(torch.from_numpy(x), torch.from_numpy(y)).item() * n
            count += n
    model.train(was_training)
    return total / count, count
