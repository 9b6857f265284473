#!/usr/bin/env python3
"""Builds the small test tokenizers under tests/data/ with Hugging Face
`tokenizers`, so the C tokenizer (text/tokenizer/tokenizer.c) can be checked
against the reference implementation without downloading model files.

Owner: coordinator tokenizer.  Callers: a developer, by hand, when the test
data must be regenerated; tests/tokenizer_conformance.py and
tests/unit/text/test_tokenizer.c read the files it writes.

    pip install tokenizers            # 0.23.3 produced the committed files
    python3 tools/make_tokenizers.py  # writes tests/data/llama{2,3}-small*/

    # the real Llama 2 vocabulary instead (only that file is written); needs
    # transformers<5 + sentencepiece + protobuf: transformers 5.x converts this
    # .model into an empty vocabulary.  4.57.6 produced the committed file.
    python3 tools/make_tokenizers.py --llama2-model /work/shared/data/llama2-tokenizer.model

Outputs (each a Hugging Face tokenizer.json):
  llama2-small/         SentencePiece-style BPE, byte fallback, Metaspace
                        pre-tokenizer (prepend_scheme=first, split=false),
                        Llama 2 decoder (Replace, ByteFallback, Fuse, Strip)
  llama2-small-legacy/  same model, laid out like Meta's Llama 2 file:
                        normalizer Prepend("▁") + Replace(" ", "▁")
  llama2-small-split/   same model, Metaspace(prepend_scheme=always,
                        split=true) and a Metaspace decoder
  llama2-small-added/   the legacy layout without byte fallback (unknown
                        characters become one fused <unk>) and extra added
                        tokens, normalized and not, special and not
  llama3-small/         byte-level BPE with the Llama 3 Split regex,
                        ignore_merges, <|begin_of_text|> etc. as added tokens
  gpt2-small/           GPT-2 family: ByteLevel(use_regex=true), <|endoftext|>
  smollm2-small/        SmolLM2's layout: Digits(individual_digits=true) then
                        ByteLevel(use_regex=true), SmolLM2's special tokens
  qwen2-small/          Qwen2's layout: NFC, Split with the Qwen2 regex,
                        ByteLevel(use_regex=false), <|im_start|> etc.
  deepseek-small/       DeepSeek LLM's layout: the Split sequence llama.cpp
                        names "deepseek-llm", ByteLevel(use_regex=false),
                        a BOS template
  misc-small/           the other supported parts: NFKC, Lowercase, Strip,
                        Replace(Regex), WhitespaceSplit, Punctuation,
                        Digits(contiguous), Split(String, MergedWithPrevious,
                        invert), ByteLevel(add_prefix_space=true)
  misc2-small/          NFD, StripAccents, Whitespace, Metaspace(split)
  llama2/               (optional) converted from the real Llama 2 .model
  smollm2-gguf/transformers.json
                        (optional, --transformers-gguf FILE.gguf) what
                        transformers' own GGUF tokenizer
                        (AutoTokenizer.from_pretrained(dir, gguf_file=...))
                        makes of every hostile string, for the conformance
                        test's check of the real SmolLM2 GGUF; needs
                        transformers and gguf (5.23.0 and 0.19.0 produced
                        the committed file)

With --gguf (needs the `gguf` package: pip install gguf; 0.19.0 produced
the committed files) each of the families above that a GGUF file can name
also gets a vocabulary-only tokenizer.gguf beside its tokenizer.json,
written the way llama.cpp's converter writes one (tokenizer.ggml.model
gpt2, tokenizer.ggml.pre the family's llama.cpp name), and llama2/ gets a
tokenizer.gguf from the real Llama 2 .model (tokenizer.ggml.model llama,
scores from SentencePiece; needs sentencepiece).  The conformance test
loads those through the C tokenizer and compares with tokenizer.json in
Hugging Face `tokenizers`.

The training text is generated here from a fixed seed, so the files are
reproducible for a given `tokenizers` version.
"""
import argparse
import json
import os
import random
import sys

from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models,
                        normalizers, pre_tokenizers, processors, trainers)

# The pre-tokenizer regexes of the families.  The DeepSeek LLM list is
# llama.cpp's LLAMA_VOCAB_PRE_TYPE_DEEPSEEK_LLM (text/tokenizer/tok_gguf.c
# carries the same strings), written with escapes so no editor can
# normalize its compatibility characters (U+2126, U+212A, ...).
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def _cls(ranges):
    return "".join(chr(a) if a == b else chr(a) + "-" + chr(b) for a, b in ranges)


DEEPSEEK_LETTERS = _cls([
    (0x41, 0x5A), (0x61, 0x7A), (0xB5, 0xB5), (0xC0, 0xD6), (0xD8, 0xF6), (0xF8, 0x1BA),
    (0x1BC, 0x1BF), (0x1C4, 0x293), (0x295, 0x2AF), (0x370, 0x373), (0x376, 0x376),
    (0x377, 0x377), (0x37B, 0x37D), (0x37F, 0x37F), (0x386, 0x386), (0x388, 0x38A),
    (0x38C, 0x38C), (0x38E, 0x3A1), (0x3A3, 0x3F5), (0x3F7, 0x481), (0x48A, 0x52F),
    (0x531, 0x556), (0x10A0, 0x10C5), (0x13A0, 0x13F5), (0x13F8, 0x13FD), (0x1C90, 0x1CBA),
    (0x1CBD, 0x1CBF), (0x1D00, 0x1D2B), (0x1D6B, 0x1D77), (0x1D79, 0x1D9A),
    (0x1E00, 0x1F15), (0x1F18, 0x1F1D), (0x1F20, 0x1F45), (0x1F48, 0x1F4D),
    (0x1F50, 0x1F57), (0x1F59, 0x1F59), (0x1F5B, 0x1F5B), (0x1F5D, 0x1F5D),
    (0x1F5F, 0x1F7D), (0x1F80, 0x1FB4), (0x1FB6, 0x1FBC), (0x1FBE, 0x1FBE),
    (0x1FC2, 0x1FC4), (0x1FC6, 0x1FCC), (0x1FD0, 0x1FD3), (0x1FD6, 0x1FDB),
    (0x1FE0, 0x1FEC), (0x1FF2, 0x1FF4), (0x1FF6, 0x1FFC), (0x2102, 0x2102),
    (0x2107, 0x2107), (0x210A, 0x2113), (0x2115, 0x2115), (0x2119, 0x211D),
    (0x2124, 0x2124), (0x2126, 0x2126), (0x2128, 0x2128), (0x212A, 0x212D),
    (0x212F, 0x2134), (0x2139, 0x2139), (0x213C, 0x213F), (0x2145, 0x2149),
    (0x214E, 0x214E), (0x2183, 0x2183), (0x2184, 0x2184), (0x2C00, 0x2C7B),
    (0x2C7E, 0x2CE4), (0x2CEB, 0x2CEE), (0x2CF2, 0x2CF2), (0x2CF3, 0x2CF3),
    (0xA640, 0xA66D), (0xA680, 0xA69B), (0xA722, 0xA76F), (0xA771, 0xA787),
    (0xA78B, 0xA78E), (0xAB70, 0xABBF), (0xFB00, 0xFB06), (0xFB13, 0xFB17),
    (0xFF21, 0xFF3A), (0xFF41, 0xFF5A), (0x10400, 0x1044F), (0x104B0, 0x104D3),
    (0x104D8, 0x104FB), (0x10C80, 0x10CB2), (0x10CC0, 0x10CF2), (0x118A0, 0x118DF),
    (0x1E900, 0x1E943)])
DEEPSEEK_PATTERNS = [
    "[\r\n]",
    "\\s?[" + DEEPSEEK_LETTERS + "]+",
    "\\s?[" + _cls([(0x21, 0x2F), (0x3A, 0x7E), (0xFF01, 0xFF0F), (0xFF1A, 0xFF5E),
                    (0x2018, 0x201F), (0x3000, 0x3002)]) + "]+",
    "\\s+$",
    "[" + _cls([(0x4E00, 0x9FA5), (0x0800, 0x4E00), (0xAC00, 0xD7FF)]) + "]+",
    "\\p{N}+",
]

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|"
                  r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
                  r"\s+(?!\S)|\s+")

WORDS = {
    "en": ("the of and to in is you that it he was for on are as with his they "
           "at be this have from or one had by word but not what all were we "
           "when your can said there use an each which she do how their if will "
           "up other about out many then them these so some her would make like "
           "him into time has look two more write go see number no way could "
           "people my than first water been call who oil its now find long down "
           "day did get come made may part tokenizer server model request stream "
           "token latency throughput coordinator batch kernel memory Hello World "
           "The A I It We They You London Paris Monday HTTP JSON GPU").split(),
    "fr": ("le la les des est été à où ça garçon français être très déjà "
           "naïve crème brûlée cœur Noël élève hôpital forêt").split(),
    "de": ("der die das und Straße Größe über schön Mädchen Fußball "
           "Äpfel Übung weiß heißen Grüße").split(),
    "es": ("el niño año mañana corazón canción España ¿qué ¡hola! "
           "pingüino camión").split(),
    "el": "καλημέρα κόσμε Ελλάδα γλώσσα αλφάβητο ψυχή Ωμέγα λόγος".split(),
    "ru": ("привет мир Москва язык программирование ёлка Щука "
           "съешь ещё этих мягких французских булок").split(),
    "ar": "مرحبا بالعالم اللغة العربية كتاب مدرسة سلام".split(),
    "he": "שלום עולם עברית ספר מחשב תודה".split(),
    "hi": "नमस्ते दुनिया हिन्दी भाषा किताब विद्यालय क्षत्रिय".split(),
    "th": ["สวัสดีครับ", "ภาษาไทย", "ประเทศไทย", "ขอบคุณ", "โรงเรียน"],
    "zh": ["你好", "世界", "中文", "分词器", "服务器", "模型", "今天天气很好",
           "我们", "学习", "计算机"],
    "ja": ["こんにちは", "世界", "日本語", "カタカナ", "ひらがな", "東京",
           "ありがとう", "トークナイザー"],
    "ko": ["안녕하세요", "세계", "한국어", "서울", "감사합니다", "토크나이저"],
}
NO_SPACE = {"th", "zh", "ja"}
EMOJI = ["😀", "🎉", "👍🏽", "🇫🇷", "👩‍💻", "❤️", "🚀", "🙂", "✨"]
CONTRACTIONS = ["don't", "it's", "we're", "they've", "I'm", "you'll", "he'd",
                "WE'RE", "IT'S", "can't", "won't", "She'll"]
CODE = ["def f(x):\n    return x * 2\n", "int main(void) { return 0; }",
        "for (i = 0; i < n; i++) {\n\tsum += a[i];\n}", "x = [1, 2, 3]",
        "if (a && b || !c) { y -= 1; }", "<div class=\"x\">hi</div>",
        "SELECT * FROM t WHERE id = 42;", "#include <stdio.h>\r\n"]


def sentence(rng):
    """One line of training text in a random script."""
    kind = rng.random()
    if kind < 0.08:
        return rng.choice(CODE)
    if kind < 0.14:
        return " ".join(str(rng.randint(0, 10 ** rng.randint(1, 9)))
                        for _ in range(rng.randint(1, 5)))
    lang = rng.choice(list(WORDS))
    if rng.random() < 0.4:
        lang = "en"
    words = [rng.choice(WORDS[lang]) for _ in range(rng.randint(3, 14))]
    if lang == "en" and rng.random() < 0.3:
        words.insert(rng.randrange(len(words)), rng.choice(CONTRACTIONS))
    if rng.random() < 0.1:
        words.append(rng.choice(EMOJI))
    if rng.random() < 0.2:
        words.insert(rng.randrange(len(words) + 1), str(rng.randint(0, 99999)))
    sep = "" if lang in NO_SPACE else " "
    text = sep.join(words)
    if lang != "en" or rng.random() < 0.5:
        text = text[0].upper() + text[1:]
    return text + rng.choice([".", "!", "?", ",", "", "...", ":", ";"])


def corpus(seed, n):
    rng = random.Random(seed)
    return [sentence(rng) for _ in range(n)]


def sp_decoder():
    return decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                              decoders.Fuse(), decoders.Strip(" ", 1, 0)])


def sp_template(bos_id):
    return processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B:1",
                                         special_tokens=[("<s>", bos_id)])


def train_sentencepiece_style(lines, vocab_size):
    """Returns (vocab dict, merges list) laid out like Llama 2: <unk> <s> </s>,
    then the 256 <0xNN> byte tokens, then the learnt pieces."""
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    # Merges never cross a word boundary, as in SentencePiece: train on
    # Metaspace-split words, then ship the unsplit form like Llama 2 does.
    tok.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="always", split=True)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - 259, limit_alphabet=400,
                                  show_progress=False, special_tokens=[])
    tok.train_from_iterator(lines, trainer)
    learnt = json.loads(tok.to_str())["model"]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab["<0x%02X>" % b] = len(vocab)
    for piece, _ in sorted(learnt["vocab"].items(), key=lambda kv: kv[1]):
        if piece not in vocab:
            vocab[piece] = len(vocab)
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m)
              for m in learnt["merges"]]
    return vocab, merges


def sp_tokenizer(vocab, merges, layout):
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>",
                               byte_fallback=layout != "added", fuse_unk=True))
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t in ("<unk>", "<s>", "</s>")])
    if layout == "added":
        tok.add_tokens([AddedToken("<tool>", normalized=False),
                        AddedToken("good morning", normalized=True),
                        AddedToken("ñu", normalized=True)])
        tok.add_special_tokens([AddedToken("<|im_end|>", special=True, normalized=False)])
        layout = "legacy"
    if layout == "metaspace":
        tok.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first", split=False)
        tok.decoder = sp_decoder()
    elif layout == "legacy":
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"),
                                               normalizers.Replace(" ", "▁")])
        tok.decoder = sp_decoder()
    else:  # split
        tok.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="always", split=True)
        tok.decoder = decoders.Sequence([decoders.Metaspace(prepend_scheme="always"),
                                         decoders.ByteFallback(), decoders.Fuse()])
    tok.post_processor = sp_template(vocab["<s>"])
    return tok


LLAMA3_SPECIALS = (["<|begin_of_text|>", "<|end_of_text|>",
                    "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
                    "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>",
                    "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>",
                    "<|eot_id|>", "<|python_tag|>"] +
                   ["<|reserved_special_token_%d|>" % i for i in range(3, 12)])


def llama3_tokenizer(lines, vocab_size):
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True,
                                 use_regex=False)])
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - len(LLAMA3_SPECIALS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False, special_tokens=[])
    tok.train_from_iterator(lines, trainer)
    spec = json.loads(tok.to_str())
    spec["model"]["ignore_merges"] = True  # as in Meta's Llama 3 file
    tok = Tokenizer.from_str(json.dumps(spec))
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t in LLAMA3_SPECIALS])
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(
            single="<|begin_of_text|> $A",
            pair="<|begin_of_text|> $A <|begin_of_text|>:1 $B:1",
            special_tokens=[("<|begin_of_text|>", bos)])])
    tok.decoder = decoders.ByteLevel()
    return tok


SMOLLM2_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<repo_name>",
                    "<file_sep>"]
QWEN2_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
DEEPSEEK_SPECIALS = ["<\uff5cbegin\u2581of\u2581sentence\uff5c>",
                     "<\uff5cend\u2581of\u2581sentence\uff5c>"]


def bytelevel_tokenizer(lines, vocab_size, pre, specials, normalizer=None, bos=None):
    """Byte-level BPE trained with the family's own pre-tokenizer (so its
    merges never cross the family's word boundaries, as in the real ones),
    specials as added tokens, a ByteLevel decoder, BOS when given."""
    tok = Tokenizer(models.BPE())
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - len(specials),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False, special_tokens=[])
    tok.train_from_iterator(lines, trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    if bos is not None:
        bid = tok.token_to_id(bos)
        tok.post_processor = processors.TemplateProcessing(
            single=bos + " $A", pair=bos + " $A " + bos + ":1 $B:1",
            special_tokens=[(bos, bid)])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.decoder = decoders.ByteLevel()
    return tok


def family_tokenizers(lines):
    """name -> (tokenizer, llama.cpp pre-tokenizer name or None)."""
    bl = lambda regex, prefix=False: pre_tokenizers.ByteLevel(
        add_prefix_space=prefix, trim_offsets=True, use_regex=regex)
    split = lambda pat, beh="isolated", inv=False: pre_tokenizers.Split(Regex(pat), beh, invert=inv)
    out = {}
    out["gpt2-small"] = (bytelevel_tokenizer(lines, 3000, bl(True), ["<|endoftext|>"]), "gpt-2")
    out["smollm2-small"] = (bytelevel_tokenizer(
        lines, 3000, pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                              bl(True)]), SMOLLM2_SPECIALS), "smollm")
    out["qwen2-small"] = (bytelevel_tokenizer(
        lines, 3000, pre_tokenizers.Sequence([split(QWEN2_PATTERN), bl(False)]),
        QWEN2_SPECIALS, normalizer=normalizers.NFC()), "qwen2")
    out["deepseek-small"] = (bytelevel_tokenizer(
        lines, 3000, pre_tokenizers.Sequence([split(p) for p in DEEPSEEK_PATTERNS] + [bl(False)]),
        DEEPSEEK_SPECIALS, bos=DEEPSEEK_SPECIALS[0]), "deepseek-llm")
    out["misc-small"] = (bytelevel_tokenizer(
        lines, 2500, pre_tokenizers.Sequence([
            pre_tokenizers.WhitespaceSplit(),
            pre_tokenizers.Punctuation(behavior="contiguous"),
            pre_tokenizers.Digits(individual_digits=False),
            pre_tokenizers.Split("-", "merged_with_previous"),
            pre_tokenizers.Split(Regex("[aeiou]"), "merged_with_next", invert=True),
            bl(False, prefix=True)]),
        ["<|endoftext|>"], normalizer=normalizers.Sequence([
            normalizers.NFKC(), normalizers.Replace(Regex("[0-9]{4,}"), "#"),
            normalizers.Lowercase(), normalizers.Strip()])), None)
    misc2 = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True))
    misc2.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.StripAccents(),
                                             normalizers.Strip(left=True, right=False)])
    misc2.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Whitespace(), pre_tokenizers.Punctuation(behavior="removed"),
        pre_tokenizers.Metaspace(prepend_scheme="first", split=True)])
    misc2.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=2000, show_progress=False,
                                                         special_tokens=["<unk>", "<s>"]))
    misc2.decoder = decoders.Metaspace(prepend_scheme="first")
    out["misc2-small"] = (misc2, None)
    return out


def save(tok, root, name):
    d = os.path.join(root, name)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "tokenizer.json")
    tok.save(path, pretty=True)
    print("%s: vocab %d, %d bytes" % (path, tok.get_vocab_size(), os.path.getsize(path)))


def gguf_writer(path):
    try:
        import gguf
    except ImportError:
        sys.exit("--gguf needs: pip install gguf")
    from importlib.metadata import version
    print("gguf", version("gguf"))
    return gguf, gguf.GGUFWriter(path, "llama")


def gguf_finish(w, path):
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print("%s: %d bytes" % (path, os.path.getsize(path)))


def save_gguf_bpe(json_path, pre_name):
    """A vocabulary-only GGUF holding tokenizer.json's BPE tokenizer the way
    llama.cpp's converter stores one: every token by id, added tokens typed
    control (special) or user-defined, merges as "a b"."""
    spec = json.load(open(json_path, encoding="utf-8"))
    vocab = dict(spec["model"]["vocab"])
    kind = {}
    for a in spec["added_tokens"]:
        vocab[a["content"]] = a["id"]
        kind[a["id"]] = 3 if a["special"] else 4
    n = max(vocab.values()) + 1
    tokens = ["[PAD%d]" % i for i in range(n)]
    for t, i in vocab.items():
        tokens[i] = t
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]]
    path = os.path.join(os.path.dirname(json_path), "tokenizer.gguf")
    gguf, w = gguf_writer(path)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre_name)
    w.add_token_list(tokens)
    w.add_token_types([kind.get(i, 1) for i in range(n)])
    w.add_token_merges(merges)
    post = json.dumps(spec.get("post_processor"), ensure_ascii=False)
    bos = [a["id"] for a in spec["added_tokens"] if a["content"] in post]
    w.add_add_bos_token(bool(bos))
    if bos:
        w.add_bos_token_id(bos[0])
    eos = [a["id"] for a in spec["added_tokens"] if "end" in a["content"]]
    if eos:
        w.add_eos_token_id(eos[0])
    gguf_finish(w, path)


def save_gguf_llama2(model_path, root):
    """Llama 2's tokenizer.model as llama.cpp stores it: pieces, scores,
    token types, no merges."""
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=model_path)
    path = os.path.join(root, "llama2", "tokenizer.gguf")
    gguf, w = gguf_writer(path)
    types = []
    for i in range(sp.get_piece_size()):
        types.append(2 if sp.is_unknown(i) else 3 if sp.is_control(i) else
                     6 if sp.is_byte(i) else 5 if sp.is_unused(i) else 1)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list([sp.id_to_piece(i) for i in range(sp.get_piece_size())])
    w.add_token_scores([sp.get_score(i) for i in range(sp.get_piece_size())])
    w.add_token_types(types)
    w.add_bos_token_id(sp.bos_id())
    w.add_eos_token_id(sp.eos_id())
    w.add_unk_token_id(sp.unk_id())
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(True)
    gguf_finish(w, path)


def convert_llama2(model_path, root):
    """Real Llama 2 vocabulary via transformers' slow->fast converter; written
    compact (about 1.8 MB) rather than pretty (3.6 MB)."""
    try:
        from transformers import LlamaTokenizerFast
    except ImportError:
        sys.exit("--llama2-model needs: pip install 'transformers<5' sentencepiece protobuf")
    fast = LlamaTokenizerFast(vocab_file=model_path, from_slow=True, add_prefix_space=True)
    spec = json.loads(fast.backend_tokenizer.to_str())
    if len(spec["model"]["vocab"]) != 32000:
        sys.exit("conversion produced %d pieces, expected 32000 (transformers>=5?)"
                 % len(spec["model"]["vocab"]))
    d = os.path.join(root, "llama2")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "tokenizer.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(spec, f, ensure_ascii=False, separators=(",", ":"))
    print("%s: %d bytes" % (path, os.path.getsize(path)))


def transformers_gguf(gguf_path, root):
    """Records transformers' GGUF tokenizer on the hostile strings."""
    import hashlib
    import transformers
    from transformers import AutoTokenizer
    d, f = os.path.split(os.path.abspath(gguf_path))
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    hostile = []
    with open(os.path.join(root, "hostile_strings.txt"), encoding="utf-8") as fh:
        for line in fh.read().split("\n"):
            if line and not line.startswith("#"):
                hostile.append(json.loads(line))
    sha = hashlib.sha256(open(gguf_path, "rb").read()).hexdigest()
    out = {"transformers": transformers.__version__, "tokenizers": tokenizers_version(),
           "gguf_file": f, "gguf_sha256": sha,
           "pre_tokenizer": repr(tok.backend_tokenizer.pre_tokenizer),
           "texts": hostile,
           "ids": [tok(t, add_special_tokens=False)["input_ids"] for t in hostile]}
    path = os.path.join(root, "smollm2-gguf", "transformers.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(out, fh, ensure_ascii=False, separators=(",", ":"))
        fh.write("\n")
    print("%s: %d strings, %d bytes" % (path, len(hostile), os.path.getsize(path)))


def tokenizers_version():
    import tokenizers
    return tokenizers.__version__


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..",
                                                  "tests", "data"))
    ap.add_argument("--llama2-model", help="convert this SentencePiece .model "
                    "into llama2/tokenizer.json (and build nothing else)")
    ap.add_argument("--gguf", action="store_true", help="also write the tokenizer.gguf "
                    "files (with --llama2-model: llama2/tokenizer.gguf only)")
    ap.add_argument("--transformers-gguf", metavar="GGUF", help="record transformers' "
                    "GGUF tokenizer of this file into smollm2-gguf/transformers.json "
                    "(and build nothing else)")
    args = ap.parse_args()
    import tokenizers
    print("tokenizers", tokenizers.__version__)
    if args.transformers_gguf:
        transformers_gguf(args.transformers_gguf, args.out)
        return
    if args.llama2_model:
        if args.gguf:
            save_gguf_llama2(args.llama2_model, args.out)
        else:
            convert_llama2(args.llama2_model, args.out)
        return
    lines = corpus(seed=20240611, n=30000)
    vocab, merges = train_sentencepiece_style(lines, 2000)
    for name, layout in (("llama2-small", "metaspace"),
                         ("llama2-small-legacy", "legacy"),
                         ("llama2-small-split", "split"),
                         ("llama2-small-added", "added")):
        save(sp_tokenizer(vocab, merges, layout), args.out, name)
    save(llama3_tokenizer(lines, 3000), args.out, "llama3-small")
    families = family_tokenizers(lines)
    for name, (tok, _) in families.items():
        save(tok, args.out, name)
    if args.gguf:
        save_gguf_bpe(os.path.join(args.out, "llama3-small", "tokenizer.json"), "llama-bpe")
        for name, (_, pre) in families.items():
            if pre:
                save_gguf_bpe(os.path.join(args.out, name, "tokenizer.json"), pre)


if __name__ == "__main__":
    main()
