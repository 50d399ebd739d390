"""An independent float64 NumPy forward of a CED model, written from DESIGN.md 1.1-1.3 and 1.7.

It shares nothing with the engine: it reads config.json and model.safetensors
itself (the safetensors header with json, the tensors with numpy.frombuffer)
and runs the full causal forward (every layer at every position, lo = 0),
which DESIGN.md 1.4 makes the value every serving path must reproduce.

Usage as a module:
    model = load_model(model_dir)
    logits = forward(model, token_ids)   # float64 [len(token_ids), vocab_size]
"""

import json
import os
import struct

import numpy as np

# Defaults for keys config.json may omit ("as in Llama": DESIGN.md 1.1).
_DEFAULT_ROPE_THETA = 500000.0
_DEFAULT_RMS_NORM_EPS = 1e-5


class Config:
    """The keys of DESIGN.md 1.1 that the forward reads."""

    def __init__(self, obj):
        self.vocab_size = int(obj["vocab_size"])
        self.hidden_size = int(obj["hidden_size"])
        self.num_layers = int(obj["num_layers"])
        self.num_heads = int(obj["num_heads"])
        self.num_kv_heads = int(obj["num_kv_heads"])
        self.head_dim = int(obj["head_dim"])
        self.intermediate_size = int(obj["intermediate_size"])
        self.num_encoder_layers = int(obj.get("num_encoder_layers", self.num_layers // 2))
        self.sliding_window = int(obj.get("sliding_window", 0))
        self.rope_theta = float(obj.get("rope_theta", _DEFAULT_ROPE_THETA))
        self.rms_norm_eps = float(obj.get("rms_norm_eps", _DEFAULT_RMS_NORM_EPS))
        src = obj.get("global_kv_source")
        self.global_kv_source = list(range(self.num_layers)) if src is None else [int(s) for s in src]
        moe = obj.get("moe")
        self.moe = None if moe is None else MoeConfig(moe)
        if len(self.global_kv_source) != self.num_layers:
            raise ValueError("global_kv_source must have num_layers entries")
        if self.num_heads % self.num_kv_heads != 0:
            raise ValueError("num_heads must be a multiple of num_kv_heads")


class MoeConfig:
    """The `moe` block of DESIGN.md 1.7, with the defaults the engine documents."""

    def __init__(self, obj):
        self.num_routed_experts = int(obj["num_routed_experts"])
        self.num_experts_per_tok = int(obj["num_experts_per_tok"])
        self.moe_intermediate_size = int(obj["moe_intermediate_size"])
        self.num_shared_experts = int(obj.get("num_shared_experts", 0))
        self.first_dense_layers = int(obj.get("first_dense_layers", 0))
        self.scoring = obj.get("scoring", "softmax")
        self.norm_topk_prob = bool(obj.get("norm_topk_prob", False))
        self.routed_scaling_factor = float(obj.get("routed_scaling_factor", 1.0))
        if self.scoring not in ("softmax", "sigmoid"):
            raise ValueError(f"moe.scoring {self.scoring!r}")


_DTYPES = {"F32": np.dtype("<f4"), "F64": np.dtype("<f8"), "F16": np.dtype("<f2"),
           "BF16": np.dtype("<u2")}


def read_safetensors(path):
    """{name: float64 array} from a safetensors file (u64 header size, JSON header, data)."""
    with open(path, "rb") as f:
        blob = f.read()
    (header_len,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + header_len].decode("utf-8"))
    data = memoryview(blob)[8 + header_len:]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = _DTYPES.get(info["dtype"])
        if dtype is None:
            raise ValueError(f"{name}: unsupported dtype {info['dtype']}")
        begin, end = info["data_offsets"]
        shape = tuple(int(s) for s in info["shape"])
        raw = np.frombuffer(data[begin:end], dtype=dtype)
        if raw.size != int(np.prod(shape, dtype=np.int64)):
            raise ValueError(f"{name}: {raw.size} values for shape {shape}")
        if info["dtype"] == "BF16":
            raw = (raw.astype(np.uint32) << 16).view(np.float32)
        tensors[name] = raw.astype(np.float64).reshape(shape)
    return tensors


class Model:
    def __init__(self, config, weights):
        self.config = config
        self.w = weights


def load_model(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        config = Config(json.load(f))
    return Model(config, read_safetensors(os.path.join(model_dir, "model.safetensors")))


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, positions, theta):
    """Rotate-half RoPE (Llama) of x [T, heads, D] at the given positions."""
    d = x.shape[-1]
    half = d // 2
    inv_freq = theta ** (-np.arange(half, dtype=np.float64) * 2.0 / d)
    ang = positions.astype(np.float64)[:, None] * inv_freq[None, :]  # [T, D/2]
    cos = np.cos(ang)[:, None, :]
    sin = np.sin(ang)[:, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def silu(x):
    return x / (1.0 + np.exp(-x))


def swiglu(w, prefix, b):
    return (silu(b @ w[prefix + "w_gate"].T) * (b @ w[prefix + "w_up"].T)) @ w[prefix + "w_down"].T


def moe_ffn(m, w, p, b):
    """DESIGN.md 1.7 for rows b [T, d]: scores, top k (ties: lower index), gates, experts."""
    z = b @ w[p + "router"].T  # [T, n]
    if m.scoring == "softmax":
        e = np.exp(z - z.max(axis=-1, keepdims=True))
        probs = e / e.sum(axis=-1, keepdims=True)
    else:
        probs = 1.0 / (1.0 + np.exp(-z))
    out = np.zeros_like(b)
    for t in range(b.shape[0]):
        # A stable sort on -p keeps the lower index first among equals.
        top = np.argsort(-probs[t], kind="stable")[:m.num_experts_per_tok]
        gates = probs[t][top]
        if m.norm_topk_prob:
            gates = gates / gates.sum()
        gates = gates * m.routed_scaling_factor
        for e_idx, g in zip(top, gates):
            out[t] += g * swiglu(w, f"{p}experts.{int(e_idx)}.", b[t:t + 1])[0]
    if m.num_shared_experts > 0:
        out += swiglu(w, p + "shared.", b)
    return out


def round_bf16(x):
    """x rounded to float32, then to bfloat16 (round to nearest even), as float64."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32).astype(np.float64)


# Storage formats of DESIGN.md 1.5 the reference can model: every K (after
# RoPE) and V is rounded to the format before attention reads it.
KV_ROUNDING = {"f32": lambda x: x, "bf16": round_bf16}


def forward(model, tokens, kv_format="f32"):
    """float64 logits [T, vocab] of the full causal forward over `tokens`.

    kv_format "f32" is the exact forward (no rounding of K/V); "bf16" rounds
    each stored K and V value to bfloat16, modelling a bf16 KV cache.
    """
    kv_round = KV_ROUNDING[kv_format]
    c = model.config
    w = model.w
    tokens = np.asarray(tokens, dtype=np.int64)
    t_len = tokens.shape[0]
    if tokens.min() < 0 or tokens.max() >= c.vocab_size:
        raise ValueError("token id out of range")
    pos = np.arange(t_len)
    heads, groups, dim = c.num_heads, c.num_kv_heads, c.head_dim
    per_group = heads // groups
    win = c.sliding_window
    eps = c.rms_norm_eps
    scale = 1.0 / np.sqrt(dim)
    # Masks [T(query), T(key)]: global keys at 0..t, local keys at t-W+1..t.
    qpos, kpos = pos[:, None], pos[None, :]
    global_mask = kpos <= qpos
    local_mask = (kpos <= qpos) & (kpos > qpos - win)

    x = w["embed"][tokens]  # h_0
    h_enc = None
    global_kv = {}
    for l in range(c.num_layers):
        p = f"layers.{l}."
        a = rmsnorm(x, w[p + "attn_norm"], eps)
        q = rope((a @ w[p + "wq"].T).reshape(t_len, heads, dim), pos, c.rope_theta)
        if l == c.global_kv_source[l]:
            if l < c.num_encoder_layers:
                src = a
            else:
                src = rmsnorm(h_enc, w["encoder_norm"], eps)
            kg = kv_round(rope((src @ w[p + "global_k"].T).reshape(t_len, groups, dim), pos,
                               c.rope_theta))
            vg = kv_round((src @ w[p + "global_v"].T).reshape(t_len, groups, dim))
            global_kv[l] = (kg, vg)
        keys, values, masks = [], [], []
        if c.global_kv_source[l] >= 0:
            kg, vg = global_kv[c.global_kv_source[l]]
            keys.append(kg)
            values.append(vg)
            masks.append(global_mask)
        if win > 0:
            keys.append(kv_round(rope((a @ w[p + "local_k"].T).reshape(t_len, groups, dim), pos,
                                      c.rope_theta)))
            values.append(kv_round((a @ w[p + "local_v"].T).reshape(t_len, groups, dim)))
            masks.append(local_mask)
        k = np.concatenate(keys, axis=0)  # [S, G, D], S = branches * T
        v = np.concatenate(values, axis=0)
        mask = np.concatenate(masks, axis=1)  # [T, S]
        # Query head h reads kv head h // (H / G).
        kh = np.repeat(k, per_group, axis=1)  # [S, H, D]
        vh = np.repeat(v, per_group, axis=1)
        scores = np.einsum("thd,shd->hts", q, kh) * scale
        scores = np.where(mask[None, :, :], scores, -np.inf)
        scores -= scores.max(axis=-1, keepdims=True)
        probs = np.exp(scores)
        probs /= probs.sum(axis=-1, keepdims=True)
        attn = np.einsum("hts,shd->thd", probs, vh).reshape(t_len, heads * dim)
        x = x + attn @ w[p + "wo"].T
        b = rmsnorm(x, w[p + "ffn_norm"], eps)
        if c.moe is not None and l >= c.moe.first_dense_layers:
            x = x + moe_ffn(c.moe, w, p, b)
        else:
            x = x + swiglu(w, p, b)
        if l == c.num_encoder_layers - 1:
            h_enc = x  # h_E
    return rmsnorm(x, w["final_norm"], eps) @ w["lm_head"].T
