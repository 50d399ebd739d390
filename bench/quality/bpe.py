#!/usr/bin/env python3
"""Trains a byte-level BPE tokenizer (GPT-2 style) and writes it as a Hugging Face
tokenizer.json + tokenizer_config.json, the format the engine's tokenizer reads.

Also the encoder the training scripts use (`Bpe.encode`): the GPT-2 pre-tokenizer
regex (the `regex` module, as the ByteLevel pre-tokenizer runs it), then merges
applied lowest rank first, the same algorithm as the Hugging Face BPE model, so
the ids a model is trained on are the ids the server feeds it (bench/quality/run.sh
checks that against `ced tokenize`).

Usage: bpe.py --corpus DIR --vocab-size 4096 --out DIR
"""
import argparse
import heapq
import json
import os
import sys
from collections import Counter

import regex

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
BOS, EOS = "<|bos|>", "<|eos|>"
SPECIALS = [BOS, EOS]
# The chat template of the default model. It is a documentation language model, not an
# instruction-tuned one: a conversation is rendered as plain text it continues.
CHAT_TEMPLATE = ("{{ bos_token }}{% for message in messages %}"
                 "{% if message['role'] == 'system' %}{{ message['content'] }}\n\n"
                 "{% elif message['role'] == 'user' %}{{ message['content'] }}\n\n"
                 "{% else %}{{ message['content'] }}{{ eos_token }}{% endif %}"
                 "{% endfor %}")


def bytes_to_unicode():
    """GPT-2's reversible map of the 256 bytes to printable characters."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


BYTE_CHARS = bytes_to_unicode()
_PAT = regex.compile(GPT2_PATTERN)


def pretokenize(text):
    """The byte-level spelling of each pre-token of `text`."""
    return ["".join(BYTE_CHARS[b] for b in piece.encode("utf-8")) for piece in _PAT.findall(text)]


def read_documents(path):
    with open(path, encoding="utf-8") as f:
        for line in f:
            yield json.loads(line)["text"]


def train(word_counts, num_merges, log_every=500):
    """Standard BPE training on a word -> count table; returns the merges in order."""
    words = [list(w) for w in word_counts]
    counts = list(word_counts.values())
    pair_counts = Counter()
    where = {}
    for i, (w, c) in enumerate(zip(words, counts)):
        for a, b in zip(w, w[1:]):
            pair_counts[(a, b)] += c
            where.setdefault((a, b), set()).add(i)
    heap = [(-c, p) for p, c in pair_counts.items()]
    heapq.heapify(heap)
    merges = []
    while len(merges) < num_merges and heap:
        neg, pair = heapq.heappop(heap)
        if pair_counts.get(pair, 0) != -neg:
            continue  # stale entry
        if -neg < 2:
            break
        merges.append(pair)
        a, b = pair
        merged = a + b
        touched = Counter()
        for i in where.pop(pair, ()):
            w, c = words[i], counts[i]
            for x, y in zip(w, w[1:]):
                pair_counts[(x, y)] -= c
                touched[(x, y)] += 0
            out, j = [], 0
            while j < len(w):
                if j + 1 < len(w) and w[j] == a and w[j + 1] == b:
                    out.append(merged)
                    j += 2
                else:
                    out.append(w[j])
                    j += 1
            words[i] = out
            for x, y in zip(out, out[1:]):
                pair_counts[(x, y)] += c
                touched[(x, y)] += 0
                where.setdefault((x, y), set()).add(i)
        pair_counts.pop(pair, None)
        for p in touched:
            c = pair_counts.get(p, 0)
            if c <= 0:
                pair_counts.pop(p, None)
            else:
                heapq.heappush(heap, (-c, p))
        if log_every and len(merges) % log_every == 0:
            print(f"  {len(merges)}/{num_merges} merges", file=sys.stderr, flush=True)
    return merges


class Bpe:
    """Encoder/decoder for a tokenizer.json this script wrote."""

    def __init__(self, tokenizer_dir):
        with open(os.path.join(tokenizer_dir, "tokenizer.json"), encoding="utf-8") as f:
            tj = json.load(f)
        self.vocab = tj["model"]["vocab"]
        self.ranks = {tuple(m.split(" ")): r for r, m in enumerate(tj["model"]["merges"])}
        self.specials = {t["content"]: t["id"] for t in tj["added_tokens"]}
        self.id_to_token = {i: t for t, i in self.vocab.items()}
        self.byte_of = {c: b for b, c in BYTE_CHARS.items()}
        self.bos = self.specials[BOS]
        self.eos = self.specials[EOS]
        self.cache = {}

    def _word(self, w):
        got = self.cache.get(w)
        if got is not None:
            return got
        syms = list(w)
        while len(syms) > 1:
            best, best_rank = None, None
            for i in range(len(syms) - 1):
                r = self.ranks.get((syms[i], syms[i + 1]))
                if r is not None and (best_rank is None or r < best_rank):
                    best, best_rank = (syms[i], syms[i + 1]), r
            if best is None:
                break
            out, j = [], 0
            while j < len(syms):
                if j + 1 < len(syms) and (syms[j], syms[j + 1]) == best:
                    out.append(syms[j] + syms[j + 1])
                    j += 2
                else:
                    out.append(syms[j])
                    j += 1
            syms = out
        ids = [self.vocab[s] for s in syms]
        if len(self.cache) < 1_000_000:
            self.cache[w] = ids
        return ids

    def encode(self, text):
        ids = []
        for w in pretokenize(text):
            ids.extend(self._word(w))
        return ids

    def decode(self, ids):
        out = bytearray()
        for i in ids:
            tok = self.id_to_token.get(int(i))
            if tok is not None:
                out.extend(self.byte_of[c] for c in tok)
        return out.decode("utf-8", errors="replace")


def write_tokenizer(merges, out_dir, model_max_length):
    vocab = {BYTE_CHARS[b]: b for b in range(256)}
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    added = []
    for s in SPECIALS:
        added.append({"id": len(vocab) + len(added), "content": s, "single_word": False,
                      "lstrip": False, "rstrip": False, "normalized": False, "special": True})
    tj = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                           "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [f"{a} {b}" for a, b in merges]},
    }
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False, separators=(",", ":"))
    cfg = {"bos_token": BOS, "eos_token": EOS, "add_bos_token": True, "add_eos_token": False,
           "clean_up_tokenization_spaces": False, "model_max_length": model_max_length,
           "tokenizer_class": "PreTrainedTokenizerFast", "chat_template": CHAT_TEMPLATE}
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, ensure_ascii=False, indent=1)
    return len(vocab) + len(added)


def main():
    ap = argparse.ArgumentParser(description="Train a byte-level BPE tokenizer.json.")
    ap.add_argument("--corpus", required=True, help="folder with train.jsonl (corpus.py)")
    ap.add_argument("--vocab-size", type=int, default=4096,
                    help="total ids incl. 256 bytes and 2 special tokens (default: %(default)s)")
    ap.add_argument("--model-max-length", type=int, default=256)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    if not 512 <= args.vocab_size <= 65536:
        sys.exit("--vocab-size must be in [512, 65536]")
    word_counts = Counter()
    for text in read_documents(os.path.join(args.corpus, "train.jsonl")):
        word_counts.update(pretokenize(text))
    print(f"{len(word_counts)} distinct pre-tokens", file=sys.stderr)
    merges = train(word_counts, args.vocab_size - 256 - len(SPECIALS))
    n = write_tokenizer(merges, args.out, args.model_max_length)
    print(f"wrote {args.out}/tokenizer.json: {n} ids ({len(merges)} merges)")


if __name__ == "__main__":
    main()
