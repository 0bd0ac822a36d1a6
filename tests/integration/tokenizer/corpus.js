// Deterministic corpus of varied strings for tokenizer parity tests and benchmarks.
// generateCorpus(seed, count) -> array of JS strings (may hold lone surrogates).
'use strict';

function mulberry32(seed) {
  let a = seed >>> 0;
  return function () {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const WORDS = (
  'the of and to in is was that for it with as on be at by this had not are but from or have ' +
  'an they which one you were her all she there would their we him been has when who will more ' +
  'no if out so said what up its about into than them can only other new some could time these ' +
  'two may then do first any my now such like our over man me even most made after also did ' +
  'many before must through back years where much your way well down should because each just ' +
  'those people Mr how too little state good very make world still own see men work long get ' +
  'here between both life being under never day same another know while last might us great ' +
  'old year off come since against go came right used take three tokenizer router inference ' +
  'cache latency throughput GPU Kubernetes naïve café résumé coöperate façade jalapeño Straße ' +
  "don't can't it's I'm we're they've you'll he'd O'Brien rock'n'roll DON'T IT'S WE'LL I'VE"
).split(' ');

const CODE = [
  'int main(int argc, char** argv) {\n  return 0;\n}\n',
  'def f(x):\n    return [i * 2 for i in range(x) if i % 3 == 0]\n',
  'const x = await fetch(`https://example.com/api?q=${query}&n=10`);\n',
  '#include <vector>\n#include "absl/status/status.h"\n',
  'for (size_t i = 0; i < n; ++i) { sum += a[i] * b[i]; }\n',
  '    if (x != nullptr && x->next) {\n\t\tfree(x);\n\t}\n',
  'SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC;\n',
  '<div class="main"><p>Hello &amp; welcome</p></div>\n',
  '{"key": [1, 2.5, -3e10, true, null], "nested": {"a": "b\\n"}}\n',
  'fn main() -> Result<(), Box<dyn Error>> { println!("{:?}", v); Ok(()) }\n',
  '$ ls -la /usr/local/bin | grep -E "^d" && echo done\n',
  'x=1;y=2;z=x+y*3/4-5%6**7//8\n',
  'template <typename T>\nstd::unique_ptr<T> Make() { return std::make_unique<T>(); }\n',
  '// TODO(alice): fix this\n/* multi\n * line */\n',
  '    \n\n\n        return;\r\n\r\n',
];

const CJK = [
  '我们今天去公园散步，天气非常好。', '东京是日本的首都，人口超过一千万。',
  'これは日本語のテストです。ひらがなとカタカナ、そして漢字。', 'トークナイザーのパリティテスト',
  '한국어 문장도 포함됩니다. 안녕하세요!', '中华人民共和国成立于1949年10月1日。',
  '「引用」『二重引用』【括弧】（全角）', '机器学习模型的推理延迟需要优化',
  'ｆｕｌｌｗｉｄｔｈ　ｔｅｘｔ　１２３', '繁體中文與简体中文混合使用',
];

const EMOJI = [
  '😀', '👍🏽', '👨‍👩‍👧‍👦', '🏳️‍🌈', '🇯🇵', '🇺🇸🇬🇧', '❤️', '🤖', '🔥🔥🔥', '✨', '🧑🏿‍💻', '☕', '1️⃣', '🫠',
];

const RTL = [
  'مرحبا بالعالم', 'السلام عليكم ورحمة الله', 'שלום עולם', 'עברית עם ניקוד: שָׁלוֹם',
  'العربية 123 English mixed', '\u202Eright-to-left override\u202C', 'فارسی: سلام دنیا',
];

const COMBINING = [
  'e\u0301', 'a\u0308', 'n\u0303', 'Z\u0351\u0353\u0321a\u0362\u0345l\u0337g\u031bo\u0327',
  '\u1100\u1161\u11a8', 'か\u3099', 'A\u030a', '\u212b', '\ufb01', 'ﬀ', 'ǅ', 'o\u0302\u0323',
  'ế', 'क्षत्रिय', 'தமிழ்', 'ไทย ภาษา', 'ᄀ', '\u0915\u093f',
];

const ODD = [
  '\ud800', '\udfff', 'a\ud83dz', '\ufffd', '\ufeff', '\u200b', '\u200d', '\uffff', '\ufffe',
  '\ue000', '\u0085', '\u2028', '\u2029', '\u180e', '\u0000', '\u0001', '\u001f', '\u007f',
  '\u00a0', '\u3000', '\u2009', '\u202f', '\u205f', '\u1680', '\u0378', '\u{10ffff}', '\u{1d400}',
  '\u{1f9ff}', '\u{e0041}', '\u{20000}', '\u0600', '\u00ad', '\u2062', '\u{1d7d8}', '\u2160',
  '\u00b2', '\u00bd', '\u0660\u0661', '\u0966', '\u{1f100}', 'İ', 'ß', 'ẞ', 'Σ', 'ς', 'ŉ',
];

const SPECIAL = [
  '<|im_start|>', '<|im_end|>', '<|endoftext|>', '<think>', '</think>', '<tool_call>',
  '<|begin_of_text|>', '<|start_header_id|>', '<|end_header_id|>', '<|eot_id|>',
  '<bos>', '<eos>', '<start_of_turn>', '<end_of_turn>', '<pad>', '<unk>', '<mask>',
  '<unused0>', '<unused99>', '<table>', '<h1>', '<|reserved_special_token_5|>', '<|im_sta',
  '<|im_start', 'im_start|>', '<<|im_end|>>', '<|<|eot_id|>|>', '<start_of_image>',
  '<|fim_prefix|>', '<|vision_start|>', '[multimodal]',
];

const WS = [' ', '  ', '   ', '\t', '\n', '\n\n', '\r\n', ' \n ', '\n\n\n\n', '\t\t', '        ',
  '\u00a0', '\u3000', ' \t\n', '\r', '\u000b', '\u000c', '  \n  \n'];

function pick(rng, arr) { return arr[Math.floor(rng() * arr.length)]; }
function int(rng, lo, hi) { return lo + Math.floor(rng() * (hi - lo + 1)); }

function prose(rng) {
  const n = int(rng, 1, 25);
  const parts = [];
  for (let i = 0; i < n; i++) {
    let w = pick(rng, WORDS);
    const r = rng();
    if (r < 0.1) w = w.toUpperCase();
    else if (r < 0.2) w = w[0].toUpperCase() + w.slice(1);
    parts.push(w);
    if (rng() < 0.12) parts.push(pick(rng, [',', '.', ';', ':', '!', '?', ' -', '...', '"', "'"]));
  }
  let s = '';
  for (const p of parts) s += (/^[,.;:!?]/.test(p) ? '' : ' ') + p;
  return rng() < 0.5 ? s.trimStart() : s;
}

function digits(rng) {
  const kinds = [
    () => String(int(rng, 0, 9)),
    () => String(int(rng, 0, 1e6)),
    () => String(Math.floor(rng() * 1e15)) + String(int(rng, 0, 99999)),
    () => (rng() * 1000).toFixed(int(rng, 0, 6)),
    () => int(rng, 1, 31) + '/' + int(rng, 1, 12) + '/' + int(rng, 1900, 2100),
    () => '+1 (' + int(rng, 100, 999) + ') ' + int(rng, 100, 999) + '-' + int(rng, 1000, 9999),
    () => '0x' + Math.floor(rng() * 0xffffffff).toString(16),
    () => '1,234,567.89', () => '３.１４', () => '٣٤٥', () => '१२३',
  ];
  return pick(rng, kinds)();
}

function whitespace(rng) {
  let s = '';
  const n = int(rng, 1, 4);
  for (let i = 0; i < n; i++) s += pick(rng, WS);
  if (rng() < 0.1) s += ' '.repeat(int(rng, 10, 80));
  return s;
}

function randomCodePoint(rng) {
  const r = rng();
  let cp;
  if (r < 0.4) cp = int(rng, 0x20, 0x7e);
  else if (r < 0.6) cp = int(rng, 0xa0, 0x2fff);
  else if (r < 0.75) cp = int(rng, 0x3000, 0xd7ff);
  else if (r < 0.85) cp = int(rng, 0xe000, 0xffff);
  else if (r < 0.97) cp = int(rng, 0x10000, 0x2ffff);
  else cp = int(rng, 0xd800, 0xdfff);  // lone surrogate
  return String.fromCharCode.apply(null, cp >= 0x10000 && cp <= 0x10ffff
    ? [0xd800 + ((cp - 0x10000) >> 10), 0xdc00 + ((cp - 0x10000) & 0x3ff)] : [cp]);
}

function fragment(rng) {
  const r = rng();
  if (r < 0.26) return prose(rng);
  if (r < 0.40) return pick(rng, CODE);
  if (r < 0.50) return pick(rng, CJK);
  if (r < 0.56) { let s = ''; const n = int(rng, 1, 4); for (let i = 0; i < n; i++) s += pick(rng, EMOJI); return s; }
  if (r < 0.62) return pick(rng, RTL);
  if (r < 0.68) return pick(rng, COMBINING);
  if (r < 0.74) return digits(rng);
  if (r < 0.80) return whitespace(rng);
  if (r < 0.88) return pick(rng, SPECIAL);
  if (r < 0.94) return pick(rng, ODD);
  let s = ''; const n = int(rng, 1, 12); for (let i = 0; i < n; i++) s += randomCodePoint(rng); return s;
}

function generateCorpus(seed, count) {
  const rng = mulberry32(seed);
  const out = [];
  for (let i = 0; i < count; i++) {
    const n = rng() < 0.05 ? int(rng, 20, 80) : int(rng, 1, 6);
    let s = '';
    for (let j = 0; j < n; j++) {
      s += fragment(rng);
      const sep = rng();
      if (sep < 0.5) s += ' ';
      else if (sep < 0.6) s += '\n';
    }
    if (rng() < 0.3) s = s.trim();
    out.push(s);
  }
  // Fixed edge cases.
  out.push('', ' ', '  ', '\n', 'a', '<|im_start|>', ' <|im_start|> ', 'Hello world',
    ' '.repeat(5000), 'a'.repeat(3000), '\n'.repeat(200), '😀'.repeat(500));
  return out;
}

module.exports = { generateCorpus, mulberry32 };
