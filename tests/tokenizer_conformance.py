#!/usr/bin/env python3
"""Conformance of the C tokenizer (coordinator/tokenizer.c) with Hugging Face
`tokenizers`, id for id.

Owner: coordinator tokenizer.  Caller: `make test` / `make test-tokenizer`
(CI), or by hand:

    pip install tokenizers==0.23.3  # the version that built tests/data
    python3 tests/tokenizer_conformance.py [build/bin/shardline-tok]

For every tests/data/*/tokenizer.json it checks, against the reference:
  encode   the hostile strings (tests/data/hostile_strings.txt) and random
           mixtures of them (fixed seed), with add_special_tokens on and
           off, and with special tokens in the text treated as text
           (HF encode_special_tokens=True = our COORD_TOK_SPLIT_SPECIAL)
  invalid  byte strings that are not UTF-8.  HF cannot take them, so the
           expectation is built from HF's own parts: its pre-tokenizer
           splits the text with a private-use stand-in (one character per
           maximal invalid subsequence, like errors="replace"), its model
           encodes every piece, and the raw bytes are what get encoded --
           byte-level tokens or <0xNN> byte fallback
  sweep    every code point U+0000..U+10FFFF (surrogates aside) in short
           probes ("a?a .?."), for tokenizers with the regex split -- the
           check that the generated Unicode tables
           (tools/gen_unicode_tables.py) classify letters, numbers and
           spaces exactly as HF's regex engine does
  decode   random id sequences (byte tokens, specials, unknown ids), with
           skip_special_tokens on and off; the C streaming detokenizer must
           give HF's text too and never a chunk that is not whole UTF-8
Each mismatch prints the input and both id lists; the last line is
"N passed, N failed" and the exit status is non-zero on any failure.
"""
import argparse
import codecs
import glob
import json
import os
import random
import subprocess
import sys

try:
    from tokenizers import Tokenizer
except ImportError:
    sys.exit("tokenizer_conformance: needs Hugging Face tokenizers "
             "(pip install tokenizers==0.23.3)")

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_SHOWN = 25  # mismatches printed per tokenizer and kind


def bytes_to_unicode():
    """GPT-2's byte -> printable character table (as HF ByteLevel)."""
    keep = (list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) +
            list(range(0xAE, 0x100)))
    table, n = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + n)
            n += 1
    return table


BYTE_CHAR = bytes_to_unicode()


def load_hostile(path):
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f.read().split("\n"):
            if line and not line.startswith("#"):
                out.append(json.loads(line))
    return out


def random_mixes(rng, pool, n):
    seps = ["", " ", "  ", "\n", "\r\n", "\t", "'s ", "'LL", "123", " 4567 ", ".", "!! ",
            "\u3000", "\u00a0", "😀", "e\u0301", "<s>", "<|begin_of_text|>", "▁"]
    out = []
    for _ in range(n):
        parts = [rng.choice(pool)[:rng.randint(1, 40)] for _ in range(rng.randint(1, 5))]
        s = ""
        for p in parts:
            s += p + rng.choice(seps)
        out.append(s)
    return out


INVALID = [b"\xff", b"\xfe", b"\x80", b"\xbf", b"\xc0\x80", b"\xc1\xbf", b"\xe2\x82",
           b"\xe2\x82\x41", b"\xed\xa0\x80", b"\xf0\x9f\x98", b"\xf0\x80\x80\x80",
           b"\xf4\x90\x80\x80", b"\xf8\x88\x80\x80\x80", b"\xc3", b"\xe0\x80\xaf"]
VALID_FRAGS = ["a", "hello", " world", "it's", "123", " ", "\n", "!", "é", "日本", "😀",
               "  ", "x", "'S", "Ω", "\t", "ab cd"]


def invalid_cases(rng, n):
    out = [bytes(b) for b in INVALID]
    for _ in range(n):
        data = b""
        for _ in range(rng.randint(1, 8)):
            if rng.random() < 0.4:
                data += rng.choice(INVALID)
            elif rng.random() < 0.2:
                data += bytes([rng.randrange(256)])
            else:
                data += rng.choice(VALID_FRAGS).encode()
        out.append(data)
    return out


def sweep_strings():
    out, block = [], []
    for cp in range(0x110000):
        if 0xD800 <= cp < 0xE000:
            continue
        block.append(chr(cp))
        if len(block) == 256:
            out.append(" ".join("a%sa .%s." % (c, c) for c in block))
            block = []
    out.append(" ".join("a%sa .%s." % (c, c) for c in block))
    return out


class Ref:
    """The Hugging Face side for one tokenizer.json."""

    def __init__(self, path):
        self.tok = Tokenizer.from_file(path)
        spec = json.load(open(path, encoding="utf-8"))
        self.byte_level = "ByteLevel" in json.dumps(spec.get("pre_tokenizer"))
        self.regex_split = "Split" in json.dumps(spec.get("pre_tokenizer"))
        self.byte_fallback = spec["model"].get("byte_fallback", False)
        self.vocab_size = max(self.tok.get_vocab(with_added_tokens=True).values()) + 1
        self.prefix = self.tok.encode("", add_special_tokens=True).ids
        self.specials = [a["id"] for a in spec.get("added_tokens", []) if a.get("special")]
        if self.byte_level:
            self.byte_tokens = [self.tok.token_to_id(BYTE_CHAR[b]) for b in range(256)]
        else:
            self.byte_tokens = [self.tok.token_to_id("<0x%02X>" % b) for b in range(256)]
        self.byte_tokens = [i for i in self.byte_tokens if i is not None]

    def encode(self, texts, add_special, split_special=False):
        self.tok.encode_special_tokens = split_special
        try:
            return [e.ids for e in self.tok.encode_batch(texts, add_special_tokens=add_special)]
        finally:
            self.tok.encode_special_tokens = False

    def encode_invalid(self, data, add_special):
        """Expected ids for bytes that are not UTF-8 (see module doc)."""
        stand_in = {}

        def handler(e):
            ch = chr(0xF0000 + len(stand_in))  # private use: class "other"
            stand_in[ch] = e.object[e.start:e.end]
            return ch, e.end

        codecs.register_error("conformance-stand-in", handler)
        text = data.decode("utf-8", "conformance-stand-in")
        raw = lambda s: b"".join(stand_in.get(c) or c.encode() for c in s)
        ids = list(self.prefix) if add_special else []
        if self.byte_level:
            for _, (a, b) in self.tok.pre_tokenizer.pre_tokenize_str(text):
                mapped = "".join(BYTE_CHAR[x] for x in raw(text[a:b]))
                ids += [t.id for t in self.tok.model.tokenize(mapped)]
            return ids
        norm = self.tok.normalizer.normalize_str(text) if self.tok.normalizer else text
        pieces = ([p for p, _ in self.tok.pre_tokenizer.pre_tokenize_str(norm)]
                  if self.tok.pre_tokenizer else [norm])
        bpe = lambda chunk: [t.id for t in self.tok.model.tokenize(chunk)] if chunk else []
        if not self.byte_fallback:  # a stand-in is an unknown character too
            return ids + [i for p in pieces for i in bpe(p)]
        for piece in pieces:
            chunk = ""
            for c in piece:
                if c in stand_in:  # bytes never merge: they split the word
                    ids += bpe(chunk)
                    chunk = ""
                    ids += [self.tok.token_to_id("<0x%02X>" % x) for x in stand_in[c]]
                else:
                    chunk += c
            ids += bpe(chunk)
        return ids

    def decode(self, ids, skip):
        return self.tok.decode(ids, skip_special_tokens=skip)

    def runs_valid(self, ids, skip):
        """True when every byte-fallback run decodes as UTF-8 on its own: the
        case where the stream must equal decode exactly (see tokenizer.h)."""
        if self.byte_level:
            return True
        byte_of = {i: b for b, i in enumerate(self.byte_tokens)}
        run = b""
        for i in list(ids) + [None]:
            if i is not None and skip and i in self.specials:
                continue
            if i in byte_of:
                run += bytes([byte_of[i]])
                continue
            try:
                run.decode("utf-8")
            except UnicodeDecodeError:
                return False
            run = b""
        return True


class CTok:
    """The C side: one shardline-tok batch process per request list."""

    def __init__(self, cli, path):
        self.cli, self.path = cli, path

    def run(self, requests):
        proc = subprocess.run([self.cli, self.path, "batch"], input="\n".join(requests) + "\n",
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError("%s exited %d: %s" % (self.cli, proc.returncode, proc.stderr))
        lines = proc.stdout.split("\n")[:len(requests)]
        if len(lines) != len(requests):
            raise RuntimeError("%s answered %d of %d requests" % (self.cli, len(lines), len(requests)))
        return lines

    def encode(self, datas, flags):
        out = self.run(["E %d %s" % (flags, d.hex()) for d in datas])
        return [l if l.startswith("ERR") else [int(x) for x in l.split()] for l in out]

    def decode(self, seqs, skips, stream):
        out = self.run(["%s %d %s" % ("S" if stream else "D", int(sk), " ".join(map(str, s)))
                        for s, sk in zip(seqs, skips)])
        res = []
        for l in out:
            bad = l.startswith("BADCHUNK ")
            l = l[len("BADCHUNK "):] if bad else l
            res.append(l if l.startswith("ERR") else (bytes.fromhex(l), bad))
        return res


class Tally:
    def __init__(self):
        self.passed = self.failed = 0
        self.shown = {}

    def check(self, ok, key, describe):
        if ok:
            self.passed += 1
            return
        self.failed += 1
        self.shown[key] = self.shown.get(key, 0) + 1
        if self.shown[key] <= MAX_SHOWN:
            print("MISMATCH [%s] %s" % (key, describe()))
        elif self.shown[key] == MAX_SHOWN + 1:
            print("MISMATCH [%s] ... (further ones not shown)" % key)


def first_diff(a, b):
    if not isinstance(b, list):
        return "C error: %s" % b
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return "first difference at index %d: hf %d, c %d" % (i, x, y)
    return "lengths differ: hf %d, c %d" % (len(a), len(b))


def check_encode(name, ref, c, texts, tally, kind, flag_sets=(1, 0, 3)):
    for flags in flag_sets:
        add, split = bool(flags & 1), bool(flags & 2)
        want = ref.encode(texts, add, split)
        got = c.encode([t.encode("utf-8") for t in texts], flags)
        for s, w, g in zip(texts, want, got):
            tally.check(w == g, "%s %s" % (name, kind), lambda: "flags=%d text=%r\n  hf %s\n  c  %s\n  %s"
                        % (flags, s[:300], w, g, first_diff(w, g)))


def check_invalid(name, ref, c, datas, tally):
    for flags in (1, 0):
        got = c.encode(datas, flags)
        for d, g in zip(datas, got):
            w = ref.encode_invalid(d, bool(flags))
            tally.check(w == g, name + " invalid-utf8", lambda: "flags=%d bytes=%r\n  hf %s\n  c  %s\n  %s"
                        % (flags, d, w, g, first_diff(w, g)))


def decode_cases(rng, ref, hostile, n):
    seqs, skips = [], []
    pool_enc = ref.encode(hostile[:200], True)
    for i in range(n):
        r = rng.random()
        if r < 0.3:
            s = rng.choice(pool_enc)
        else:
            s = []
            for _ in range(rng.randint(1, 30)):
                x = rng.random()
                if x < 0.4 and ref.byte_tokens:
                    s.append(rng.choice(ref.byte_tokens))
                elif x < 0.5 and ref.specials:
                    s.append(rng.choice(ref.specials))
                elif x < 0.52:
                    s.append(ref.vocab_size + rng.randint(0, 5))  # no such token
                else:
                    s.append(rng.randrange(ref.vocab_size))
        seqs.append(s)
        skips.append(rng.random() < 0.5)
    return seqs, skips


def check_decode(name, ref, c, seqs, skips, tally):
    got = c.decode(seqs, skips, stream=False)
    streamed = c.decode(seqs, skips, stream=True)
    for s, sk, g, st in zip(seqs, skips, got, streamed):
        w = ref.decode(s, sk).encode("utf-8")
        tally.check(not isinstance(g, str) and g[0] == w, name + " decode",
                    lambda: "skip_special=%d ids=%s\n  hf %r\n  c  %r" % (sk, s, w, g))
        exact = ref.runs_valid(s, sk)
        ok = not isinstance(st, str) and not st[1] and (st[0] == w or not exact)
        tally.check(ok, name + " stream", lambda: "skip_special=%d ids=%s\n  hf     %r\n  stream %r"
                    % (sk, s, w, st))


def main():
    ap = argparse.ArgumentParser(description="C tokenizer vs Hugging Face tokenizers")
    ap.add_argument("tok_cli", nargs="?", default=os.path.join(HERE, "..", "build", "bin",
                                                                "shardline-tok"),
                    help="path of the shardline-tok binary (default: build/bin/shardline-tok)")
    ap.add_argument("--data", default=os.path.join(HERE, "data"))
    ap.add_argument("--only", help="test only tokenizers whose folder name contains this")
    ap.add_argument("--no-sweep", action="store_true", help="skip the all-code-point sweep")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()

    import tokenizers
    print("tokenizers", tokenizers.__version__)
    hostile = load_hostile(os.path.join(args.data, "hostile_strings.txt"))
    paths = sorted(glob.glob(os.path.join(args.data, "*", "tokenizer.json")))
    if args.only:
        paths = [p for p in paths if args.only in os.path.basename(os.path.dirname(p))]
    if not paths:
        sys.exit("no tokenizer.json under %s" % args.data)
    sweep = [] if args.no_sweep else sweep_strings()
    total = Tally()
    for path in paths:
        name = os.path.basename(os.path.dirname(path))
        rng = random.Random(args.seed)
        ref, c = Ref(path), CTok(args.tok_cli, path)
        tally = Tally()
        check_encode(name, ref, c, hostile, tally, "hostile")
        check_encode(name, ref, c, random_mixes(rng, hostile, 600), tally, "mix")
        check_invalid(name, ref, c, invalid_cases(rng, 300), tally)
        if sweep and ref.regex_split:  # the only user of Unicode classes
            check_encode(name, ref, c, sweep, tally, "sweep", (0,))
        seqs, skips = decode_cases(rng, ref, hostile, 1500)
        check_decode(name, ref, c, seqs, skips, tally)
        print("%s: %d passed, %d failed" % (name, tally.passed, tally.failed))
        total.passed += tally.passed
        total.failed += tally.failed
    print("%d passed, %d failed" % (total.passed, total.failed))
    return 1 if total.failed else 0


if __name__ == "__main__":
    sys.exit(main())
