// Probes which code points the reference (Hugging Face tokenizers' Oniguruma regexes,
// through @anush008/tokenizers) matches with \p{L}, \p{N} and \s, by splitting every
// code point with a Split pre-tokenizer. Writes ranges to OUT (default
// /tmp/ref_categories.json). Used to derive kExtraL / kExtraN / kSpaceItems in
// src/tokenizer/regex.cc (doc/tokenizer.md, "Regular expressions").
//   node tests/integration/tokenizer/probe_categories.js NODE_MODULES [OUT]
'use strict';
const { Tokenizer } = require(require('path').join(process.argv[2] || '.cache/npm/node_modules', '@anush008/tokenizers'));
const fs = require('fs');
(async () => {
  const mk = (re) => Tokenizer.fromString(JSON.stringify({
    version: '1.0', truncation: null, padding: null, added_tokens: [], normalizer: null,
    pre_tokenizer: { type: 'Split', pattern: { Regex: re }, behavior: 'Removed', invert: true },
    post_processor: null, decoder: null,
    model: { type: 'WordLevel', vocab: { '[UNK]': 0 }, unk_token: '[UNK]' } }));
  const out = {};
  for (const [name, re] of [['L', '\\p{L}'], ['N', '\\p{N}'], ['s', '\\s']]) {
    const t = mk(re);
    const ranges = [];
    for (let base = 0; base < 0x110000; base += 0x8000) {
      const cps = [];
      for (let c = base; c < base + 0x8000; c++) if (c < 0xd800 || c > 0xdfff) cps.push(c);
      const s = cps.map((c) => String.fromCodePoint(c)).join('\u0001');
      const e = await t.encode(s, null, { addSpecialTokens: false });
      for (const [a, b] of e.getOffsets()) {
        for (let k = a; k < b; k++) { if (k % 2 === 0) { const cp = cps[k / 2];
          if (ranges.length && ranges[ranges.length - 1][1] === cp - 1) ranges[ranges.length - 1][1] = cp; else ranges.push([cp, cp]); } }
      }
    }
    out[name] = ranges;
    console.log(name, ranges.length);
  }
  fs.writeFileSync(process.argv[3] || '/tmp/ref_categories.json', JSON.stringify(out));
})();
