#!/usr/bin/env python3
"""Builds the small test tokenizers under tests/data/ with Hugging Face
`tokenizers`, so the C tokenizer (coordinator/tokenizer.c) can be checked
against the reference implementation without downloading model files.

Owner: coordinator tokenizer.  Callers: a developer, by hand, when the test
data must be regenerated; tests/tokenizer_conformance.py and
tests/unit/test_tokenizer.c read the files it writes.

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
  llama2/               (optional) converted from the real Llama 2 .model

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


def save(tok, root, name):
    d = os.path.join(root, name)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "tokenizer.json")
    tok.save(path, pretty=True)
    print("%s: vocab %d, %d bytes" % (path, tok.get_vocab_size(), os.path.getsize(path)))


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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..",
                                                  "tests", "data"))
    ap.add_argument("--llama2-model", help="convert this SentencePiece .model "
                    "into llama2/tokenizer.json (and build nothing else)")
    args = ap.parse_args()
    import tokenizers
    print("tokenizers", tokenizers.__version__)
    if args.llama2_model:
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


if __name__ == "__main__":
    main()
