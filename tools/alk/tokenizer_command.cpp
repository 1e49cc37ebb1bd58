// `alk tokenizer train|encode|decode`: the byte-level BPE tokenizer (include/alk/tokenizer.h).
//   alk tokenizer train --corpus FILE --vocab-size N --out DIR [--special TOK ...]
//   alk tokenizer encode --from DIR < text     -> space-separated ids on stdout
//   alk tokenizer decode --from DIR < ids      -> the exact bytes on stdout
#include <chrono>
#include <climits>
#include <fstream>
#include <iostream>
#include <sstream>

#include "alk/tokenizer.h"
#include "tools/alk/commands.h"

namespace alk::cli {

namespace {

std::string read_all(std::istream& in) {
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void run_train(const std::string& corpus_path, int vocab_size, const std::string& out,
               const std::vector<std::string>& specials) {
  std::ifstream f(corpus_path, std::ios::binary);
  check(static_cast<bool>(f), "tokenizer", Loc::current(), "cannot open corpus ", corpus_path);
  std::string corpus = read_all(f);
  auto start = std::chrono::steady_clock::now();
  Tokenizer t = Tokenizer::train(corpus, vocab_size, specials);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  t.save(out);
  std::cerr << "trained " << t.vocab_size() << " tokens (" << t.merges().size() << " merges, " << t.special_ids().size()
            << " special) from " << corpus.size() << " bytes in " << seconds << " s; wrote " << out
            << "/vocab.json, merges.txt, special_tokens.json\n";
  if (t.vocab_size() < vocab_size)
    std::cerr << "note: the corpus ran out of pairs before reaching " << vocab_size << " tokens\n";
}

void run_encode(const std::string& dir) {
  Tokenizer t = Tokenizer::load(dir);
  std::string text = read_all(std::cin);
  std::vector<int32_t> ids = t.encode(text);
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
  std::cout << line << "\n";
}

void run_decode(const std::string& dir) {
  Tokenizer t = Tokenizer::load(dir);
  std::string text = read_all(std::cin);
  std::vector<int32_t> ids;
  std::istringstream in(text);
  std::string word;
  while (in >> word) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    check(used == word.size() && v >= INT32_MIN && v <= INT32_MAX, "tokenizer", Loc::current(),
          "decode expects whitespace-separated integer ids on stdin, got '", word, "'");
    ids.push_back(static_cast<int32_t>(v));
  }
  std::string bytes = t.decode(ids);
  std::cout.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  std::cout.flush();
}

}  // namespace

void add_tokenizer_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("tokenizer", "train, or encode and decode with, a byte-level BPE tokenizer");
  cmd->require_subcommand(1);

  auto* train = cmd->add_subcommand("train",
                                    "learn BPE merges from a text file; writes vocab.json, merges.txt "
                                    "and special_tokens.json");
  static std::string corpus, out, from;
  static int vocab_size = 0;
  static std::vector<std::string> specials;
  train->add_option("--corpus", corpus, "training text (any bytes)")->required();
  train->add_option("--vocab-size", vocab_size, "tokens in all: 256 bytes + merges + special tokens")
      ->required()
      ->check(CLI::Range(256, 1 << 30));
  train->add_option("--out", out, "directory for the tokenizer files (created if missing)")->required();
  train->add_option("--special", specials, "special tokens, e.g. --special '<|endoftext|>' (repeatable)");
  train->callback([] { run_train(corpus, vocab_size, out, specials); });

  auto* encode = cmd->add_subcommand("encode", "text on stdin -> space-separated ids on stdout");
  encode->add_option("--from", from, "tokenizer directory (vocab.json, merges.txt)")->required();
  encode->callback([] { run_encode(from); });

  auto* decode = cmd->add_subcommand("decode", "whitespace-separated ids on stdin -> the exact bytes on stdout");
  decode->add_option("--from", from, "tokenizer directory (vocab.json, merges.txt)")->required();
  decode->callback([] { run_decode(from); });
}

}  // namespace alk::cli
