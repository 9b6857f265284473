#!/usr/bin/env python3
"""Conformance of the C tokenizer (text/tokenizer/tokenizer.c) with Hugging Face
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
  gguf     where a tokenizer.gguf sits beside the tokenizer.json (written by
           tools/make_tokenizers.py --gguf the way llama.cpp stores one):
           the C tokenizer reading the GGUF against HF on the json, and
           `shardline-tok FILE.gguf export` loaded back into HF
  smollm2  the real SmolLM2-135M-Instruct GGUF ($SHARDLINE_SMOLLM2_GGUF,
           default build/models/SmolLM2-135M-Instruct.Q4_1.gguf; skipped
           with a note when absent): every check above against HF on its
           export, and against transformers' own GGUF tokenizer as recorded
           in tests/data/smollm2-gguf/transformers.json.  transformers
           builds a plain ByteLevel pre-tokenizer and drops SmolLM2's
           Digits(individual_digits) step; strings where that changes the
           ids are counted and printed as expected differences, and each
           one must equal what HF gives with exactly that step removed
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
import tempfile
import unicodedata

try:
    from tokenizers import PreTokenizedString, Tokenizer, normalizers, pre_tokenizers
except ImportError:
    sys.exit("tokenizer_conformance: needs Hugging Face tokenizers "
             "(pip install tokenizers==0.23.3)")

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_SHOWN = 25  # mismatches printed per tokenizer and kind
# Swept through others: smollm2-small is Digits (misc-small) + GPT-2's
# pattern (gpt2-small).  Each sweep takes about a minute on 2 cores.
SWEEP_COVERED = {"smollm2-small"}


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
CHAR_BYTE = {c: b for b, c in BYTE_CHAR.items()}


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
        parts = json.dumps([spec.get("pre_tokenizer"), spec.get("normalizer")])
        # Unicode classes or tables at work: the sweep has something to check
        self.unicode = any(k in parts for k in (
            "Split", "\"use_regex\": true", "Digits", "Punctuation", "Whitespace", "NFC", "NFD",
            "NFKC", "NFKD", "Lowercase", "Strip"))
        self.punct = "Punctuation" in parts
        self.strip_accents = "StripAccents" in parts
        self.norm_form = next((f for f in ("NFKC", "NFKD", "NFC", "NFD")
                               if '"%s"' % f in json.dumps(spec.get("normalizer"))), None)
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
        ids = list(self.prefix) if add_special else []
        # HF's own normalizer and pre-tokenizer over the stand-in text, with
        # its alignments (Metaspace's prepend_scheme "first" looks at them)
        pt = PreTokenizedString(text)
        if self.tok.normalizer:
            pt.normalize(lambda ns: self.tok.normalizer.normalize(ns))
        if self.tok.pre_tokenizer:
            self.tok.pre_tokenizer.pre_tokenize(pt)
        pieces = [p for p, _, _ in pt.get_splits()]
        if self.byte_level:
            for p in pieces:  # byte alphabet -> bytes -> stand-ins undone
                data = bytes(CHAR_BYTE[ch] for ch in p)
                for ch, bad in stand_in.items():
                    data = data.replace(ch.encode(), bad)
                mapped = "".join(BYTE_CHAR[x] for x in data)
                ids += [t.id for t in self.tok.model.tokenize(mapped)]
            return ids
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


def sweep_probes(s):
    """The code points of one sweep string, each in its own probe."""
    return [(ord(s[i + 1]), s[i:i + 7]) for i in range(0, len(s), 8)]


def explain(ref, cp, probe):
    """Why a probe may differ from HF for a known, documented reason, or None.
    Debian 12's Oniguruma 6.9.8 knows Unicode 14.0, the one inside tokenizers
    0.23.3 (onig_sys 69.9) Unicode 16.0: a character assigned since 14.0 is
    "other" to us (Python 3.11's unicodedata is 14.0 too).  HF's
    normalization tables (unicode-normalization-alignments 0.1.12) are older
    than Unicode 14.0, utf8proc's are 15.0: a probe whose HF normalization
    differs from unicodedata's is a table-version difference."""
    ch = chr(cp)
    if unicodedata.category(ch) == "Cn":
        return "new since Unicode 14.0"
    if ref.punct:  # HF's unicode_categories 0.1.1 predates Unicode 14.0 too
        hf = len(pre_tokenizers.Punctuation().pre_tokenize_str("a%sa" % ch)) == 3
        py = unicodedata.category(ch)[0] == "P" or (cp < 128 and not ch.isalnum() and
                                                     ch.isprintable() and ch != " ")
        if hf != py:
            return "HF punctuation table older than Unicode 14.0"
    if ref.strip_accents:
        hf = normalizers.StripAccents().normalize_str(ch) == ""
        if hf != (unicodedata.category(ch)[0] == "M"):
            return "HF combining-mark table older than Unicode 14.0"
    if ref.norm_form:
        hf = getattr(normalizers, ref.norm_form)().normalize_str(probe)
        if hf != unicodedata.normalize(ref.norm_form, probe):
            return "HF %s tables older than Unicode 14.0" % ref.norm_form
    return None


def check_sweep(name, ref, c, sweep, tally, explained):
    """Every code point; a string that differs is judged probe by probe and
    passes only if each differing probe has a documented reason."""
    want = ref.encode(sweep, False)
    got = c.encode([t.encode("utf-8") for t in sweep], 0)
    for s, w, g in zip(sweep, want, got):
        if w == g:
            tally.check(True, None, None)
            continue
        probes = sweep_probes(s)
        pw = ref.encode([p for _, p in probes], False)
        pg = c.encode([p.encode("utf-8") for _, p in probes], 0)
        bad = []
        for (cp, p), a, b in zip(probes, pw, pg):
            if a == b:
                continue
            why = explain(ref, cp, p)
            if why:
                explained.setdefault((name, why), []).append(cp)
            else:
                bad.append((cp, p, a, b))
        tally.check(not bad, name + " sweep", lambda: "U+%04X probe=%r\n  hf %s\n  c  %s"
                    % bad[0] if bad else "")


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


def export_gguf(cli, gguf_path):
    """shardline-tok's export of a GGUF, as a temporary tokenizer.json."""
    proc = subprocess.run([cli, gguf_path, "export"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError("export %s: %s" % (gguf_path, proc.stderr))
    f = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, encoding="utf-8")
    f.write(proc.stdout)
    f.close()
    return f.name


def check_gguf(name, ref, cli, gguf_path, hostile, mixes, seqs, skips, tally):
    """The GGUF of a family against HF on its tokenizer.json."""
    c = CTok(cli, gguf_path)
    check_encode(name + " gguf", ref, c, hostile, tally, "hostile")
    check_encode(name + " gguf", ref, c, mixes, tally, "mix")
    check_decode(name + " gguf", ref, c, seqs, skips, tally)
    path = export_gguf(cli, gguf_path)
    try:
        ex = Ref(path)
        for add in (True, False):
            for s, w, g in zip(hostile, ref.encode(hostile, add), ex.encode(hostile, add)):
                tally.check(w == g, name + " gguf export", lambda: "add_special=%d text=%r\n"
                            "  hf(json)   %s\n  hf(export) %s" % (add, s[:200], w, g))
    finally:
        os.unlink(path)


def check_smollm2(cli, data, hostile, rng, tally):
    path = os.environ.get("SHARDLINE_SMOLLM2_GGUF", os.path.join(
        HERE, "..", "build", "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    if not os.path.exists(path):
        print("smollm2-gguf: %s not found, skipped (make deps fetches it)" % path)
        return
    exported = export_gguf(cli, path)
    try:
        ref, c = Ref(exported), CTok(cli, path)
        name = "smollm2-gguf"
        check_encode(name, ref, c, hostile, tally, "hostile")
        check_encode(name, ref, c, random_mixes(rng, hostile, 600), tally, "mix")
        check_invalid(name, ref, c, invalid_cases(rng, 300), tally)
        seqs, skips = decode_cases(rng, ref, hostile, 1500)
        check_decode(name, ref, c, seqs, skips, tally)
        rec = json.load(open(os.path.join(data, "smollm2-gguf", "transformers.json"),
                             encoding="utf-8"))
        # transformers' layout: the same file with only ByteLevel(use_regex)
        plain = Tokenizer.from_file(exported)
        plain.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        got = c.encode([t.encode("utf-8") for t in rec["texts"]], 0)
        real = ref.encode(rec["texts"], False)
        expected = 0
        for t, want, g, r, p in zip(rec["texts"], rec["ids"], got, real,
                                    [e.ids for e in plain.encode_batch(rec["texts"],
                                                                       add_special_tokens=False)]):
            if g == want:
                tally.check(True, None, None)
                continue
            ok = g == r and p == want  # exactly the dropped Digits step
            expected += ok
            tally.check(ok, name + " transformers", lambda: "text=%r\n  transformers %s\n"
                        "  c            %s\n  %s" % (t[:200], want, g, first_diff(want, g)))
        print("%s: %d of %d hostile strings differ from transformers %s's GGUF tokenizer, "
              "expected (it drops SmolLM2's Digits(individual_digits) pre-tokenizer: %s)"
              % (name, expected, len(rec["texts"]), rec["transformers"], rec["pre_tokenizer"]))
    finally:
        os.unlink(exported)


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
    if not paths and not (args.only and args.only in "smollm2-gguf"):
        sys.exit("no tokenizer.json under %s" % args.data)
    sweep = [] if args.no_sweep else sweep_strings()
    total = Tally()
    explained = {}
    for path in paths:
        name = os.path.basename(os.path.dirname(path))
        rng = random.Random(args.seed)
        ref, c = Ref(path), CTok(args.tok_cli, path)
        tally = Tally()
        check_encode(name, ref, c, hostile, tally, "hostile")
        check_encode(name, ref, c, random_mixes(rng, hostile, 600), tally, "mix")
        check_invalid(name, ref, c, invalid_cases(rng, 300), tally)
        if sweep and ref.unicode and name not in SWEEP_COVERED:
            check_sweep(name, ref, c, sweep, tally, explained)
        seqs, skips = decode_cases(rng, ref, hostile, 1500)
        check_decode(name, ref, c, seqs, skips, tally)
        gguf = os.path.join(os.path.dirname(path), "tokenizer.gguf")
        if os.path.exists(gguf):
            check_gguf(name, ref, args.tok_cli, gguf, hostile, random_mixes(rng, hostile, 200),
                       seqs[:500], skips[:500], tally)
        print("%s: %d passed, %d failed" % (name, tally.passed, tally.failed))
        total.passed += tally.passed
        total.failed += tally.failed
    if not args.only or args.only in "smollm2-gguf":
        tally = Tally()
        check_smollm2(args.tok_cli, args.data, hostile, random.Random(args.seed), tally)
        if tally.passed or tally.failed:
            print("smollm2-gguf: %d passed, %d failed" % (tally.passed, tally.failed))
        total.passed += tally.passed
        total.failed += tally.failed
    for (name, why), cps in sorted(explained.items()):
        print("%s: %d code point probe(s) differ from HF, expected (%s): %s%s"
              % (name, len(cps), why, " ".join("U+%04X" % x for x in cps[:8]),
                 " ..." if len(cps) > 8 else ""))
    print("%d passed, %d failed" % (total.passed, total.failed))
    return 1 if total.failed else 0


if __name__ == "__main__":
    sys.exit(main())
