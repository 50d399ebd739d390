"""A PyTorch CED model written from DESIGN.md 1.1-1.4 and 1.6, for training and for the
quality measurements. It shares no code with the engine.

`forward` is the full causal forward (every layer at every position) with three
knobs that express the serving paths exactly, as masks on that forward:
  enc_lo   local windows of encoder layers are clipped at this position (1.6, a)
  dec_lo   local windows of decoder layers are clipped at this position (1.4, s)
  cached   global K/V of positions < cached_len are taken from an earlier forward
           instead of being recomputed (1.6: cached blocks stand)
With enc_lo = dec_lo = 0 and no cache it is the reference forward; bounded replay of
an N-token prompt is dec_lo = max(0, N - R); a resumed request is all three.
"""
import json
import math
import os
import struct

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def default_config(**over):
    c = dict(vocab_size=4096, hidden_size=256, num_layers=8, num_encoder_layers=4,
             num_heads=4, num_kv_heads=2, head_dim=64, intermediate_size=640,
             sliding_window=64, replay_window=64, rope_theta=10000.0, rms_norm_eps=1e-5,
             max_position=256, kv_cache_dtype="bf16")
    c.update(over)
    return c


def rmsnorm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


class Rope:
    def __init__(self, head_dim, theta, max_pos, device=None):
        half = head_dim // 2
        inv = theta ** (-torch.arange(half, dtype=torch.float64) * 2.0 / head_dim)
        ang = torch.arange(max_pos, dtype=torch.float64)[:, None] * inv[None, :]
        self.cos = torch.cos(ang).float()
        self.sin = torch.sin(ang).float()

    def __call__(self, x):  # x [B, heads, T, D]
        t = x.shape[2]
        cos, sin = self.cos[:t], self.sin[:t]
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, h, g, dh, f = (c["hidden_size"], c["num_heads"], c["num_kv_heads"], c["head_dim"],
                          c["intermediate_size"])
        self.attn_norm = nn.Parameter(torch.ones(d))
        self.wq = nn.Parameter(torch.empty(h * dh, d))
        self.local_k = nn.Parameter(torch.empty(g * dh, d))
        self.local_v = nn.Parameter(torch.empty(g * dh, d))
        self.global_k = nn.Parameter(torch.empty(g * dh, d))
        self.global_v = nn.Parameter(torch.empty(g * dh, d))
        self.wo = nn.Parameter(torch.empty(d, h * dh))
        self.ffn_norm = nn.Parameter(torch.ones(d))
        self.w_gate = nn.Parameter(torch.empty(f, d))
        self.w_up = nn.Parameter(torch.empty(f, d))
        self.w_down = nn.Parameter(torch.empty(d, f))


class Ced(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed = nn.Parameter(torch.empty(c["vocab_size"], c["hidden_size"]))
        self.layers = nn.ModuleList(Layer(c) for _ in range(c["num_layers"]))
        self.encoder_norm = nn.Parameter(torch.ones(c["hidden_size"]))
        self.final_norm = nn.Parameter(torch.ones(c["hidden_size"]))
        self.rope = Rope(c["head_dim"], c["rope_theta"], c["max_position"])

    def init_weights(self, generator):
        std = 0.02
        resid = std / math.sqrt(2 * self.c["num_layers"])
        with torch.no_grad():
            for name, p in self.named_parameters():
                if p.dim() == 1:
                    p.fill_(1.0)
                elif name.endswith("wo") or name.endswith("w_down"):
                    p.normal_(0.0, resid, generator=generator)
                else:
                    p.normal_(0.0, std, generator=generator)

    def forward(self, idx, enc_lo=0, dec_lo=0, cached=None, cached_len=0, want_global=False):
        """Logits [B, T, V] (lm_head tied to embed). See the module docstring."""
        c = self.c
        b, t = idx.shape
        h, g, dh = c["num_heads"], c["num_kv_heads"], c["head_dim"]
        e, w, eps = c["num_encoder_layers"], c["sliding_window"], c["rms_norm_eps"]
        pos = torch.arange(t)
        causal = pos[None, :] <= pos[:, None]
        in_window = pos[None, :] > pos[:, None] - w

        def local_mask(lo):
            return causal & in_window & (pos[None, :] >= lo)

        masks = {}
        for lo in {enc_lo, dec_lo}:
            masks[lo] = torch.cat([causal, local_mask(lo)], dim=1)  # [T, 2T]
        x = F.embedding(idx, self.embed)
        h_e = None
        made = {}
        for li, layer in enumerate(self.layers):
            a = rmsnorm(x, layer.attn_norm, eps)
            q = self.rope((a @ layer.wq.T).view(b, t, h, dh).transpose(1, 2))
            ks = self.rope((a @ layer.local_k.T).view(b, t, g, dh).transpose(1, 2))
            vs = (a @ layer.local_v.T).view(b, t, g, dh).transpose(1, 2)
            src = a if li < e else rmsnorm(h_e, self.encoder_norm, eps)
            kg = self.rope((src @ layer.global_k.T).view(b, t, g, dh).transpose(1, 2))
            vg = (src @ layer.global_v.T).view(b, t, g, dh).transpose(1, 2)
            if cached is not None and cached_len > 0:
                ck, cv = cached[li]
                kg = torch.cat([ck[:, :, :cached_len], kg[:, :, cached_len:]], dim=2)
                vg = torch.cat([cv[:, :, :cached_len], vg[:, :, cached_len:]], dim=2)
            made[li] = (kg, vg)
            k = torch.cat([kg, ks], dim=2).repeat_interleave(h // g, dim=1)
            v = torch.cat([vg, vs], dim=2).repeat_interleave(h // g, dim=1)
            scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(dh))
            scores = scores.masked_fill(~masks[enc_lo if li < e else dec_lo], float("-inf"))
            attn = torch.softmax(scores, dim=-1) @ v
            x = x + attn.transpose(1, 2).reshape(b, t, h * dh) @ layer.wo.T
            bn = rmsnorm(x, layer.ffn_norm, eps)
            x = x + (F.silu(bn @ layer.w_gate.T) * (bn @ layer.w_up.T)) @ layer.w_down.T
            if li == e - 1:
                h_e = x
        logits = rmsnorm(x, self.final_norm, eps) @ self.embed.T
        return (logits, made) if want_global else logits


# ---- DESIGN.md 1.2 files -------------------------------------------------------------

def bf16_round(t):
    """float32 tensor rounded to bfloat16 (nearest even), still float32."""
    return t.detach().to(torch.bfloat16).to(torch.float32)


def design_tensors(model):
    """{DESIGN name: float32 tensor}. lm_head is the tied embedding."""
    c = model.c
    out = {"embed": model.embed}
    for li, layer in enumerate(model.layers):
        for name in ("attn_norm", "wq", "local_k", "local_v", "global_k", "global_v", "wo",
                     "ffn_norm", "w_gate", "w_up", "w_down"):
            out[f"layers.{li}.{name}"] = getattr(layer, name)
    if c["num_encoder_layers"] < c["num_layers"]:
        out["encoder_norm"] = model.encoder_norm
    out["final_norm"] = model.final_norm
    out["lm_head"] = model.embed
    return {k: v.detach().float().contiguous() for k, v in out.items()}


def write_safetensors(path, tensors, dtype="BF16", metadata=None):
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name]
        if dtype == "BF16":
            raw = t.to(torch.bfloat16).view(torch.int16).numpy().tobytes()
        else:
            raw = t.numpy().astype("<f4").tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for raw in blobs:
            f.write(raw)


def config_json(c):
    keys = ("vocab_size", "hidden_size", "num_layers", "num_encoder_layers", "num_heads",
            "num_kv_heads", "head_dim", "intermediate_size", "sliding_window", "replay_window",
            "rope_theta", "rms_norm_eps", "max_position", "kv_cache_dtype")
    return {k: c[k] for k in keys}


def export(model, out_dir, metadata=None, dtype="BF16"):
    os.makedirs(out_dir, exist_ok=True)
    write_safetensors(os.path.join(out_dir, "model.safetensors"), design_tensors(model), dtype,
                      metadata)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config_json(model.c), f, indent=1)


def load_exported(model_dir):
    """A Ced with the weights of an exported directory (bf16 values as float32)."""
    with open(os.path.join(model_dir, "config.json")) as f:
        c = default_config(**json.load(f))
    with open(os.path.join(model_dir, "model.safetensors"), "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    model = Ced(c)
    params = dict(model.named_parameters())
    for name, info in header.items():
        if name == "__metadata__" or name == "lm_head":
            continue
        s, e_ = info["data_offsets"]
        if info["dtype"] == "BF16":
            raw = np.frombuffer(data[s:e_], dtype="<u2").astype(np.uint32) << 16
            arr = raw.view(np.float32)
        else:
            arr = np.frombuffer(data[s:e_], dtype="<f4")
        with torch.no_grad():
            params[name].copy_(torch.from_numpy(arr.copy()).view(*info["shape"]))
    return model
