// The GPT job: tokenizer, dataset, model, AdamW with warmup + cosine, the training loop
// with validation, checkpoints, metrics, and a sample at the end.
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>

#include "alk/compile.h"
#include "alk/data.h"
#include "alk/dist.h"
#include "alk/io.h"
#include "alk/nn.h"
#include "alk/optim.h"
#include "alk/pretrained.h"
#include "alk/tokenizer.h"
#include "alk/train.h"
#include "train/budget.h"
#include "train/job.h"
#include "train/report.h"
#include "train/run_model.h"

namespace alk::train {

namespace fs = std::filesystem;

namespace {

// This rank's rows of a global batch (all of them in a one-process run).
struct DistRows {
  int rank = 0, world = 1;
  int64_t first = 0, count = 0;
  Tensor take(const Tensor& t) const { return world == 1 ? t : t.slice(0, first, first + count).contiguous(); }
};

// Discards what ranks other than 0 would log.
struct NullBuffer : std::streambuf {
  int overflow(int c) override { return c; }
};

// The Hugging Face files a fine-tuning run keeps (hf/): what load_run_model and alk export
// read back. Copied once, when the run starts.
const char* const kHfFiles[] = {"config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                "generation_config.json", "chat_template.jinja"};

void copy_hf_files(const std::string& from, const std::string& run_dir) {
  const std::string to = hf_files_dir(run_dir);
  fs::create_directories(to);
  for (const char* name : kHfFiles)
    if (fs::exists(from + "/" + name)) write_file_atomic(to + "/" + name, read_file(from + "/" + name, "train"));
}

Tokenizer tokenizer_for(const Config& c, const std::string& dir, Progress& progress) {
  if (!c.init_from.empty()) return load_hf_tokenizer(hf_files_dir(dir));
  const std::string tok_dir = dir + "/tokenizer";
  // Both files: a run killed between the two writes trains the tokenizer again.
  if (fs::exists(tok_dir + "/vocab.json") && fs::exists(tok_dir + "/merges.txt")) return Tokenizer::load(tok_dir);
  auto t0 = std::chrono::steady_clock::now();
  std::string corpus = read_file(c.corpus, "train");
  Tokenizer tok = Tokenizer::train(corpus, static_cast<int>(c.vocab_size));
  tok.save(tok_dir);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::ostringstream msg;
  msg << "tokenizer: trained a " << tok.vocab_size() << "-token byte-level BPE on " << corpus.size() / 1e6
      << " MB in " << std::fixed << std::setprecision(1) << s << " s -> " << tok_dir;
  progress.note(msg.str());
  return tok;
}

// Mean loss over `batches` validation batches, in eval mode and without autograd.
// In a multi-rank run each rank takes its rows of every batch and the means are averaged.
double validate(nn::GPT& model, const TokenDataset& data, const Config& c, int64_t step, const DistRows& rows) {
  NoGradGuard no_grad;
  model.eval();
  double total = 0;
  for (int64_t i = 0; i < c.eval_batches; ++i) {
    auto [x, y] = data.batch(false, c.batch, c.ctx, c.seed, static_cast<uint64_t>(step * c.eval_batches + i));
    Device& dev = model.wte->weight.device();
    Tensor loss = nn::cross_entropy(model(rows.take(x).to(dev)), rows.take(y).to(dev));
    if (rows.world > 1) dist::all_reduce(loss, dist::ReduceOp::Avg);
    total += loss.item();
  }
  model.train();
  return total / static_cast<double>(std::max<int64_t>(c.eval_batches, 1));
}

}  // namespace

Result run_gpt(const Config& cfg_in, bool resume, std::ostream& main_log, const std::atomic<bool>* stop) {
  Config c = cfg_in;
  // A multi-rank run (mpirun, alk train --nproc): rank 0 writes the run directory and logs;
  // every rank trains on its rows of the global batch (c.batch) with averaged gradients.
  DistRows rows;
  if (dist::launched()) {
    dist::init();
    rows.rank = dist::rank();
    rows.world = dist::world_size();
    std::tie(rows.first, rows.count) = dist::shard_rows(c.batch, rows.rank, rows.world);
  }
  const bool writer = rows.rank == 0;
  NullBuffer null_buffer;
  std::ostream null_log(&null_buffer);
  std::ostream& log = writer ? main_log : null_log;
  if (c.corpus.empty()) c.corpus = default_corpus();
  {
    // Before anything is trained on it: a missing, empty or larger-than-memory corpus is a
    // clear error (the corpus is read whole; tokenizing it takes about three times its size).
    const Loc loc = Loc::current();
    std::error_code ec;
    const auto bytes = fs::file_size(c.corpus, ec);
    check(!ec, "train", loc, "cannot read corpus '", c.corpus, "': ", ec.message());
    check(bytes > 0, "train", loc, "corpus '", c.corpus, "' is empty");
    check_memory_for(3 * static_cast<uint64_t>(bytes), "train", "tokenizing corpus '" + c.corpus + "' (" +
                     std::to_string(bytes) + " bytes; it is read whole, streaming is not implemented)", loc);
  }
  Progress progress(log, c.steps, 0);
  // Rank 0 makes the tokenizer and the token cache; the others read them after it.
  if (writer) {
    fs::create_directories(c.out);
    remove_stale_files(c.out);
    if (!c.init_from.empty() && !resume) copy_hf_files(c.init_from, c.out);
    tokenizer_for(c, c.out, progress);
  }
  if (rows.world > 1) dist::barrier();
  Tokenizer tok = tokenizer_for(c, c.out, progress);
  const uint64_t fingerprint = fnv1a64(read_file(
      c.init_from.empty() ? c.out + "/tokenizer/merges.txt" : hf_files_dir(c.out) + "/tokenizer.json", "train"));
  auto load_data = [&] {
    return TokenDataset::from_file(
        c.corpus, [&tok](std::string_view s) { return tok.encode(s); }, c.out + "/tokens.bin", c.val_fraction,
        fingerprint);
  };
  std::optional<TokenDataset> loaded;
  if (writer) loaded.emplace(load_data());
  if (rows.world > 1) dist::barrier();
  if (!writer) loaded.emplace(load_data());
  const TokenDataset& data = *loaded;
  check(data.train_size() > c.ctx + 1 && data.val_size() > c.ctx + 1, "train", Loc::current(), "corpus '",
        c.corpus, "' is too small: ", data.train_size(), " training and ", data.val_size(),
        " validation tokens, and each split needs more than ctx + 1 = ", c.ctx + 1, " (with val_fraction ",
        c.val_fraction, "): give a longer text or a smaller --ctx");
  {
    std::ostringstream msg;
    msg << "data: " << c.corpus << ": " << data.train_size() << " training + " << data.val_size()
        << " validation tokens" << (data.from_cache() ? " (cached)" : "");
    progress.note(msg.str());
  }

  // Initialized on the CPU, then moved: every device starts from the same weights.
  manual_seed(c.seed);
  std::optional<HfModelInfo> hf;
  nn::GPTConfig model_cfg = gpt_config(c, tok.vocab_size());
  if (!c.init_from.empty()) {
    const std::string path = hf_files_dir(c.out) + "/config.json";
    hf.emplace();
    model_cfg = gpt_config_from_hf(read_file(path, "train"), path, &*hf);
    check(c.ctx <= model_cfg.ctx, "train", Loc::current(), "--ctx ", c.ctx, " exceeds the model's context ",
          model_cfg.ctx, " (", path, ")");
    model_cfg.dropout = c.dropout;
    c.dim = model_cfg.dim;
    c.heads = model_cfg.heads;
    c.layers = model_cfg.layers;
    c.vocab_size = model_cfg.vocab;
  }
  nn::GPT model(model_cfg);
  if (hf && !resume) {
    load_hf_weights(model, *hf, c.init_from);
    progress.note("init: " + hf->architecture + " weights from " + c.init_from);
  }
  std::string device_spec = c.device;
  if (rows.world > 1 && get_device(c.device).info().kind == "cuda")
    device_spec = "cuda:" + std::to_string(dist::local_rank());  // one GPU per local rank, as torchrun
  Device& dev = get_device(device_spec);
  model.to(dev);
  progress.note("device: " + dev.name() + " (" + dev.info().description + ")");
  // ZeRO-1: this rank's optimizer holds only the parameters it owns; checkpoints go through
  // `whole`, an optimizer over every parameter that holds state only while saving or loading.
  std::optional<dist::Zero1> zero;
  if (rows.world > 1 && c.zero == 1) zero.emplace(model.named_parameters());
  optim::AdamW opt(zero ? zero->owned() : model.named_parameters(), c.lr, {.weight_decay = c.weight_decay});
  optim::AdamW whole(model.named_parameters(), c.lr, {.weight_decay = c.weight_decay});
  const nn::NamedTensors no_state{{"step", scalar_tensor(0, DType::I64)}};
  auto save = [&](int64_t done) {
    if (!zero) {
      if (writer) save_checkpoint(c.out, model, opt, done, config_to_json(c));
      return;
    }
    whole.load_state_dict(zero->gather_state(opt));
    if (writer) save_checkpoint(c.out, model, whole, done, config_to_json(c));
    whole.load_state_dict(no_state);
  };
  optim::Schedule schedule = optim::warmup(c.warmup, optim::cosine_lr(c.lr, std::max<int64_t>(c.steps - c.warmup, 1), c.min_lr));
  int64_t start = 0;
  if (resume) {
    if (zero) {
      start = load_checkpoint(c.out, model, whole);
      opt.load_state_dict(zero->own_state(whole.state_dict()));
      whole.load_state_dict(no_state);
    } else {
      start = load_checkpoint(c.out, model, opt);
    }
    std::ostringstream msg;
    msg << "resumed from " << c.out << " at step " << start;
    progress.note(msg.str());
  }
  if (writer) {
    truncate_metrics(c.out + "/metrics.jsonl", start + 1);  // keeps steps 1..start
    write_file_atomic(c.out + "/config.json", config_to_json(c));
  }
  {
    std::ostringstream msg;
    msg << "model: " << (hf ? hf->architecture : std::string("GPT")) << " " << model.num_parameters() / 1e6 << "M parameters (vocab " << tok.vocab_size() << ", ctx "
        << c.ctx << ", dim " << c.dim << ", " << c.layers << " layers, " << c.heads << " heads); " << c.steps
        << " steps of " << c.batch << "x" << c.ctx << " tokens; ln(vocab) = " << std::log(tok.vocab_size());
    if (rows.world > 1) msg << "; data parallel over " << rows.world << " ranks, " << rows.count << " rows each";
    if (zero) msg << ", ZeRO-1 (this rank's optimizer: " << zero->owned().size() << " of " << model.parameters().size() << " parameters)";
    progress.note(msg.str());
  }
  // Data parallel: the step is the backward, the gradients' all-reduce between ranks (a host
  // call: NCCL or MPI), then the update; each half is compiled.
  std::optional<dist::DataParallel> dp;
  if (rows.world > 1) dp.emplace(model.named_parameters());
  Program backward = compile([&](const std::vector<Tensor>& in) {
    Tensor loss;
    {
      std::optional<Autocast> mixed;
      if (c.dtype != "f32") mixed.emplace(c.dtype == "bf16" ? DType::BF16 : DType::F16);
      loss = nn::cross_entropy(model(in[0]), in[1]);
    }
    capture("loss", loss);
    dp->backward(loss);  // the buckets' all-reduce starts while the backward runs
  });
  Program update = compile([&](const std::vector<Tensor>&) {
    dp->load_grads();
    if (c.grad_clip > 0) optim::clip_grad_norm(model.parameters(), c.grad_clip);
    opt.step();
    for (const Tensor& p : model.parameters()) p.zero_grad();  // under ZeRO-1 opt has only some
  });

  // The whole step (forward, loss, backward, clipping, AdamW) is traced once and replayed.
  Program train_step = compile([&](const std::vector<Tensor>& in) {
    Tensor loss;
    {
      std::optional<Autocast> mixed;  // --dtype bf16|f16: the forward in mixed precision
      if (c.dtype != "f32") mixed.emplace(c.dtype == "bf16" ? DType::BF16 : DType::F16);
      loss = nn::cross_entropy(model(in[0]), in[1]);
    }
    capture("loss", loss);
    loss.backward();
    if (c.grad_clip > 0) optim::clip_grad_norm(model.parameters(), c.grad_clip);
    opt.step();
    opt.zero_grad();
  });
  Result result;
  Progress bar(log, c.steps, start);
  const RunBudget budget(c);  // from here on, every plan fits what the parameters leave
  for (int64_t step = start; step < c.steps; ++step) {
    auto t0 = std::chrono::steady_clock::now();
    const double lr = schedule(step);
    opt.set_lr(lr);
    auto [x, y] = data.batch(true, c.batch, c.ctx, c.seed, static_cast<uint64_t>(step));
    double loss_value = 0;
    bool stop_now = stop && stop->load();
    try {
      if (dp) {
        backward({rows.take(x).to(dev), rows.take(y).to(dev)});
        dp->all_reduce();
        update({});
        if (zero) zero->sync_params();
        // The mean loss and whether any rank was asked to stop, in one all-reduce.
        Tensor both = cat({backward.captured("loss").reshape({1}), full({1}, stop_now ? 1.0 : 0.0).to(dev)});
        dist::all_reduce(both);
        const std::vector<float> v = both.to_vector<float>();
        loss_value = v[0] / rows.world;
        stop_now = v[1] > 0;
      } else {
        train_step({x.to(dev), y.to(dev)});
      }
    } catch (const Error& e) {
      if (e.op() == "budget") budget.refused(e, "the training step");
      throw;
    }
    if (step == start + 1 && budget.active()) bar.note(budget.report(dp ? backward : train_step));  // traced now
    if (!dp) loss_value = train_step.captured("loss").item();
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double tok_s = static_cast<double>(c.batch * c.ctx) / secs;
    result.losses.push_back(loss_value);
    result.steps_done = step + 1;
    MetricPoint point{step + 1, loss_value, std::nullopt, lr, tok_s};
    const bool last = step + 1 == c.steps;
    if (c.eval_every > 0 && ((step + 1) % c.eval_every == 0 || last)) {
      try {
        point.val_loss = result.val_loss = validate(model, data, c, step + 1, rows);
      } catch (const Error& e) {
        if (e.op() == "budget") budget.refused(e, "validation");
        throw;
      }
      std::ostringstream msg;
      msg << "step " << step + 1 << ": val loss " << std::fixed << std::setprecision(4) << *point.val_loss
          << " (perplexity " << std::setprecision(1) << std::exp(*point.val_loss) << ")";
      bar.note(msg.str());
    }
    if (writer && ((step + 1) % std::max<int64_t>(c.log_every, 1) == 0 || point.val_loss || last))
      append_metric(c.out + "/metrics.jsonl", point);
    bar.update(step, loss_value, lr, tok_s, c.log_every);
    const bool interrupted = dp ? stop_now : stop && stop->load();
    if ((c.ckpt_every > 0 && (step + 1) % c.ckpt_every == 0) || last || interrupted) {
      save(step + 1);
      if (interrupted || !last) bar.note("checkpoint: " + c.out + " at step " + std::to_string(step + 1));
    }
    if (interrupted) {
      result.interrupted = true;
      break;
    }
  }
  bar.finish();
  if (!writer) return result;
  write_loss_svg(c.out + "/loss.svg", read_metrics(c.out + "/metrics.jsonl"), "alk GPT: " + c.corpus);
  log << "wrote " << c.out << "/{model.safetensors, optimizer.safetensors, config.json, metrics.jsonl, loss.svg}\n";
  if (c.sample_tokens > 0 && !result.interrupted)
    log << "\nsample:\n" << sample(c.out, "And God said", c.sample_tokens, 0.8, 40, c.seed) << "\n";
  return result;
}

}  // namespace alk::train
