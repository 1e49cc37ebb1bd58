// Encodes a text with a bundle's tokenizer in JavaScript (the runtime's Tokenizer, loaded
// from the bundle's tokenizer.json as load() does) and writes {ids, decoded, type,
// vocab_size, ms} as JSON: the bridge for tests/webgpu/test_webgpu.cpp (WebgpuTokenizer.*).
//   node tokenize.mjs BUNDLE_DIR TEXT_FILE OUT.json
// No GPU is involved: the module imports nothing.
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const [dir, textFile, out] = process.argv.slice(2);
try {
  const { Tokenizer } = await import(pathToFileURL(path.join(path.resolve(dir), 'alk_webgpu.mjs')).href);
  const fetchText = async (p) => fs.readFileSync(path.join(dir, p), 'utf8');
  const tok = await Tokenizer.load(JSON.parse(await fetchText('tokenizer.json')), fetchText);
  const text = fs.readFileSync(textFile, 'utf8');
  const t0 = performance.now();
  const ids = tok.encode(text);
  const ms = performance.now() - t0;
  fs.writeFileSync(out, JSON.stringify({ type: tok.type, vocab_size: tok.vocabSize, ms, ids: Array.from(ids),
                                         decoded: tok.decode(ids) }));
  process.exit(0);
} catch (e) {
  console.error(e && e.stack ? e.stack : String(e));
  process.exit(1);
}
