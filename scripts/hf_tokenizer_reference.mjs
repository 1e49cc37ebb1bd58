// Token ids and decoded text from Hugging Face's JavaScript tokenizers (npm
// @huggingface/tokenizers), for make_hf_fixtures.py --local: reads {"root", "cases": {dir: [text]}}
// on stdin, writes {dir: [{"text", "ids", "decoded"}]} (the tokenizer's default special tokens).
import { readFileSync } from "node:fs";
import { Tokenizer } from "@huggingface/tokenizers";

const request = JSON.parse(readFileSync(0, "utf8"));
const out = {};
for (const [name, texts] of Object.entries(request.cases)) {
  const dir = `${request.root}/${name}`;
  const tokenizer = new Tokenizer(JSON.parse(readFileSync(`${dir}/tokenizer.json`, "utf8")),
                                  JSON.parse(readFileSync(`${dir}/tokenizer_config.json`, "utf8")));
  out[name] = texts.map((text) => {
    const ids = Array.from(tokenizer.encode(text).ids, Number);
    return { text, ids, decoded: tokenizer.decode(ids) };
  });
}
process.stdout.write(JSON.stringify(out));
