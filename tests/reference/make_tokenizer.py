#!/usr/bin/python3
"""Writes the byte-level BPE fixtures of tests/test_tokenizer.c.

It trains a tiny byte-level BPE on the text below, writes it as a Hugging
Face tokenizer.json (GPT-2's layout: ByteLevel pre-tokenizer and decoder,
model.type "BPE", vocab, merges, added_tokens; and once more with Llama 3's
pre-tokenizer and ignore_merges), and encodes a set of test strings with an
encoder written here independently of the C one:

  - the split is GPT-2's (or Llama 3's) pattern run by Python's `re`, with \\p{L} and
    \\p{N} spelled out as character classes built from
    unicodedata.category (Python's `re` has no \\p{...}) and \\s as Unicode
    White_Space (Python's \\s also matches U+001C..U+001F, which the regex
    engines of HF tokenizers do not);
  - the merging is GPT-2's encoder.py loop (merge every occurrence of the
    lowest-ranked pair, repeat), not the C heap.

Standard library only. Run from the repository root:

    /usr/bin/python3 tests/reference/make_tokenizer.py

Outputs, in tests/reference/tokenizer/:
  tokenizer.json        merges as "a b" strings
  tokenizer_pairs.json  the same tokenizer with merges as ["a", "b"] pairs
  tokenizer_llama3.json the same vocab and merges behind Llama 3's
                        pre-tokenizer (Sequence [Split, ByteLevel]) with
                        model.ignore_merges true
  expected.txt          one line per test string: its UTF-8 bytes in hex,
                        a tab, its ids separated by spaces
  expected_llama3.txt   the same for tokenizer_llama3.json
"""
import collections
import json
import os
import re
import sys
import unicodedata

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tokenizer")
N_MERGES = 400
SPECIALS = ["<|endoftext|>", "<|sep|>"]  # the first is also in model.vocab, as in GPT-2

TRAIN_TEXT = """\
The quick brown fox jumps over the lazy dog. The dog didn't mind; it's a lazy dog, and they'll
say it's what we've done. I'm sure you'd think so, wouldn't you? We're here, they're there.
Hello, world! Hello again, world. This is a test of the tokenizer, and this is only a test.
Numbers: 1, 2, 3, 10, 20, 100, 2024, 3.14159, 1,000,000 and 42 are numbers; so is 7.
    Indented lines, tabs\tand\ttabs, blank lines follow.


Café, naïve, façade, déjà vu, crème brûlée. Straße, groß, Fußball, schön, Grüße.
Привет, мир! Как дела? Хорошо, спасибо. Москва, Россия, привет мир.
Γειά σου κόσμε. Αλφα, βήτα, γάμμα.
漢字とかなのテキスト。中文测试，中文测试。日本語のテキストです。
Emoji: 😀 😀 👍 ❤️ 🎉 and more emoji 😀👍.
the the the the of of of and and and to to to in in in is is is it it it
123456 123456 123456 12345678 12345678 (hello) (hello) \tword \tword, 'RE 'RE 'LL 'LL!!
"""

TEST_STRINGS = [
    "",
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "I'm sure they'll say it's what we've done; don't you'd think? WE'RE, THEY'LL",
    "'s 't 're 've 'm 'll 'd 'S 'x '' ''s x's",
    "Numbers: 12345 and 3.14159, 2024-11-24, 1,000,000; x²³ ½.",
    "  leading spaces",
    "trailing spaces   ",
    "a   b\t\tc\n\nd\r\n e",
    "\n\n\n",
    "   ",
    " ",
    "tabs\tand\nnewlines\r\n\ttogether \t mixed",
    "non\u00a0breaking and ideographic\u3000space",
    "Café naïve façade — déjà vu. Straße, groß! Ÿ ǅ ŉ",
    "Привет, мир! Как дела?",
    "Γειά σου κόσμε",
    "漢字とかなのテキスト。中文测试ー",
    "emoji 😀👍🏽 and ❤️! 🎉🎉",
    "<|endoftext|>Hello<|endoftext|> world<|sep|>x <|endoftext|>",
    "<|endoftext<|sep|>|> <|endoftex",
    "mixed123abc ABC456 !!! ??? ... ---",
    "the the the the of of and and to in is it",
    "'S 'T 'RE 'Ve 'LL (hello) \tword \n word 12345678 x1234 !!\n\nabc ?!\r\n",
    "a \n b\n\n  \n  c   \t\n",
    "a zebra, zebras and 123456 (hello) \twords'RES it'LLAMA'rEs",
]

WHITE_SPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"


def bytes_to_unicode():
    """GPT-2's byte -> character table (openai/gpt-2 encoder.py)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def category_class(prefix):
    """A regex character class body for every code point whose Unicode
    category starts with prefix ("L" or "N")."""
    parts, start = [], None
    for cp in range(sys.maxunicode + 2):
        inside = cp <= sys.maxunicode and unicodedata.category(chr(cp)).startswith(prefix)
        if inside and start is None:
            start = cp
        elif not inside and start is not None:
            lo, hi = re.escape(chr(start)), re.escape(chr(cp - 1))
            parts.append(lo if start == cp - 1 else lo + "-" + hi)
            start = None
    return "".join(parts)


def split_patterns():
    """GPT-2's and Llama 3's patterns with the classes spelled out."""
    L, N, S = category_class("L"), category_class("N"), WHITE_SPACE
    gpt2 = r"'s|'t|'re|'ve|'m|'ll|'d" + f"| ?[{L}]+| ?[{N}]+| ?[^{S}{L}{N}]+|[{S}]+(?![^{S}])|[{S}]+"
    llama3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)" + f"|[^\\r\\n{L}{N}]?[{L}]+|[{N}]{{1,3}}| ?[^{S}{L}{N}]+[\\r\\n]*"
              + f"|[{S}]*[\\r\\n]+|[{S}]+(?![^{S}])|[{S}]+")
    return re.compile(gpt2), re.compile(llama3)


LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")


BYTE_ENCODER = bytes_to_unicode()
BYTE_DECODER = {c: b for b, c in BYTE_ENCODER.items()}
PAT, PAT_LLAMA3 = split_patterns()
SPECIAL_RE = re.compile("|".join(re.escape(s) for s in sorted(SPECIALS, key=len, reverse=True)))


def pieces(text, pat=PAT):
    """Pre-tokenization: each piece as a string of ByteLevel chars."""
    return ["".join(BYTE_ENCODER[b] for b in p.encode("utf-8")) for p in pat.findall(text)]


def train(text, pat=PAT):
    words = collections.Counter()
    for part in SPECIAL_RE.split(text):
        for p in pieces(part, pat):
            words[tuple(p)] += 1
    merges = []
    for _ in range(N_MERGES):
        pairs = collections.Counter()
        for w, n in words.items():
            for a, b in zip(w, w[1:]):
                pairs[a, b] += n
        if not pairs:
            break
        # Most frequent; ties go to the smallest pair, so the output is stable.
        best = min(pairs, key=lambda p: (-pairs[p], p))
        if pairs[best] < 2:
            break
        merges.append(best)
        merged = {}
        for w, n in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] = merged.get(tuple(out), 0) + n
        words = collections.Counter(merged)
    return merges


def bpe(piece, ranks):
    """openai/gpt-2 encoder.py's bpe(): merge the lowest-ranked pair
    everywhere, left to right, until no ranked pair is left."""
    word = tuple(piece)
    while len(word) > 1:
        pairs = set(zip(word, word[1:]))
        best = min(pairs, key=lambda p: ranks.get(p, float("inf")))
        if best not in ranks:
            break
        out, i = [], 0
        while i < len(word):
            if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                out.append(word[i] + word[i + 1])
                i += 2
            else:
                out.append(word[i])
                i += 1
        word = tuple(out)
    return word


def encode(text, vocab, ranks, special_ids, pat=PAT, ignore_merges=False):
    ids, pos = [], 0
    for m in list(SPECIAL_RE.finditer(text)) + [None]:
        end = m.start() if m else len(text)
        for p in pieces(text[pos:end], pat):
            if ignore_merges and p in vocab:
                ids.append(vocab[p])
            else:
                ids.extend(vocab[t] for t in bpe(p, ranks))
        if m:
            ids.append(special_ids[m.group(0)])
            pos = m.end()
    return ids


def decode(ids, id_to_token, special_by_id):
    out = bytearray()
    for i in ids:
        if i in special_by_id:
            out += special_by_id[i].encode("utf-8")
        else:
            out += bytes(BYTE_DECODER[c] for c in id_to_token[i])
    return bytes(out)


def tokenizer_json(vocab, merges, special_ids, pair_form, llama3=False):
    added = [
        {"id": special_ids[s], "content": s, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": True, "special": True}
        for s in SPECIALS
    ]
    pre = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    if llama3:
        pre = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": LLAMA3_REGEX}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": pre,
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": "",
            "end_of_word_suffix": "",
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": llama3,
            "vocab": vocab,
            "merges": [[a, b] for a, b in merges] if pair_form else [f"{a} {b}" for a, b in merges],
        },
    }


def build(pat, extra, front):
    """Trains on TRAIN_TEXT split by pat; returns vocab, merges, special ids.
    The `front` merges (byte pairs) go first, at the lowest ranks. Ids
    0..255 are the bytes in bytes_to_unicode's order (so an id is not its
    byte's value), then one per merge, then the `extra` tokens (vocab
    entries no merge makes: only ignore_merges can emit them whole), then
    the specials."""
    merges = list(front) + [m for m in train(TRAIN_TEXT, pat) if m not in front]
    vocab = {c: i for i, c in enumerate(BYTE_ENCODER.values())}
    for a, b in merges:
        vocab[a + b] = len(vocab)
    for t in extra:
        vocab[t] = len(vocab)
    special_ids = {SPECIALS[0]: len(vocab), SPECIALS[1]: len(vocab) + 1}
    vocab[SPECIALS[0]] = special_ids[SPECIALS[0]]
    return vocab, merges, special_ids


def main():
    os.makedirs(OUT, exist_ok=True)
    # GPT-2's split, merges as strings and as pairs; Llama 3's split with
    # its own merges (trained on its pieces), first merges that cross the
    # places where it cuts and GPT-2's would not, or the reverse ("3 4" in a
    # digit run, newline then space, "E S" after the contraction 'RE, "!"
    # then newline), so a wrong cut shows in the ids, and a
    # whole-word token " zebra" that only ignore_merges emits.
    setups = (("tokenizer.json", "expected.txt", False, False), ("tokenizer_pairs.json", None, True, False),
              ("tokenizer_llama3.json", "expected_llama3.txt", False, True))
    for name, expected, pair_form, llama3 in setups:
        pat = PAT_LLAMA3 if llama3 else PAT
        front = [("3", "4"), ("\u010a", "\u0120"), ("E", "S"), ("!", "\u010a")] if llama3 else []
        vocab, merges, special_ids = build(pat, ["\u0120zebra"] if llama3 else [], front)
        ranks = {m: i for i, m in enumerate(merges)}
        id_to_token = {i: t for t, i in vocab.items()}
        special_by_id = {i: s for s, i in special_ids.items()}
        with open(os.path.join(OUT, name), "w", encoding="utf-8") as f:
            json.dump(tokenizer_json(vocab, merges, special_ids, pair_form, llama3), f, ensure_ascii=False, indent=2)
            f.write("\n")
        print(f"{name}: {len(merges)} merges, vocab {len(vocab)} + 1 added token")
        if not expected:
            continue
        with open(os.path.join(OUT, expected), "w", encoding="ascii") as f:
            for s in TEST_STRINGS:
                ids = encode(s, vocab, ranks, special_ids, pat, llama3)
                assert decode(ids, id_to_token, special_by_id) == s.encode("utf-8"), s
                f.write(s.encode("utf-8").hex() + "\t" + " ".join(map(str, ids)) + "\n")


if __name__ == "__main__":
    main()
