// hardstrings.mjs lists the project's hard strings for tokenizer
// recordings (vocab.mjs, vocab-derived.mjs): special tokens, whitespace of
// every kind, contractions in both cases, long digit runs, many scripts,
// combining marks.

// Strings for every vocabulary; each vocabulary adds its own special texts.
export const common = [
    "",
    " ",
    "\n",
    " \n \n",
    "a  \n  b",
    "trailing spaces   ",
    "   leading spaces",
    "tab\tand\u000bvertical\u000cform\rfeed",
    "nbsp\u00a0ideographic\u3000line\u2028para\u2029nel\u0085end",
    "don't DON'T I'M you'RE we'Ve they'LL she'D it's 'tis o'clock",
    "''s ' s '",
    "1 12 123 1234 12345 123456 1234567",
    "3.14159 -42 1e-5 0x1F 1,000,000",
    "٣٤٥ ½ ² Ⅻ ①",
    "Hello, world!!! What?!\n\n\nNext...",
    "def f(x):\n    return x ** 2  # square\n\n\n",
    "if (a <= b && c != d) { x += y >> 2; }",
    "https://example.com/path?q=1&r=[2]#frag",
    "email@example.com $100 €50 ¥300 £20",
    "日本語のテキストです。漢字とカタカナ",
    "你好，世界！这是一个测试。",
    "안녕하세요 세계",
    "Привет, мир! Ёжик",
    "Γειά σου κόσμε",
    "مرحبا بالعالم",
    "שלום עולם",
    "नमस्ते दुनिया",
    "ภาษาไทย",
    "e\u0301 cafe\u0301 a\u0300\u0301\u0302",
    "emoji 🦙🚀👍🏽 family 👨‍👩‍👧 flag 🇩🇪",
    "mixedCamelCase and snake_case and SCREAMING_CASE",
    "µ ſ K Å ﬁ ｆｕｌｌｗｉｄｔｈ",
    "\u2581Hello\u2581world",
    "<s> </s> <unk> <|endoftext|> <|im_start|> <|im_end|> <|eot_id|>",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
    "<|user|>\n  hi <|end|>\n<|assistant|>  ",
    "</s>   after and before   </s>",
    "<<s>> <s > < s>",
];

// WordPiece (BERT) extras: what its normaliser drops or splits off (control
// and format characters, U+FFFD, accents, CJK ideographs of every block,
// ASCII and other symbols), case folding beyond ASCII, and words that match
// in part or not at all (one [UNK] for the whole word).
export const wordpiece = [
    "a\u0000b\u0001c\u200bd\ufeffe\ufffdf\u00adg h\ue000i",
    "ÀÉÎÕÜ àéîõü Çç Ññ Øø Åå ǅ ǈ İstanbul ΆΈΉ",
    "x\u0301y \u0300 \u0301\u0301 q\u20dd",
    "漢字 㐀 𠀀 𪜀 𫝀 𫠠 𬺰 豈 丽 ㄅ ｶﾀｶﾅ",
    "a+b=c <tag> ^_^ ~`| €£¥ © ° ± × ÷ ™",
    "supercalifragilisticexpialidocious unaffable embeddings tokenization",
    "abc😀def 😀 naïve résumé",
    "[CLS] hello [SEP] [MASK] [PAD] [UNK] [unused0] ##ing ▁x",
    "[CLS]hello[SEP]world[MASK]",
    "UPPER lower MiXeD 123abc abc123 a1b2c3",
    "x".repeat(300),
    "ab".repeat(150) + " end",
];
