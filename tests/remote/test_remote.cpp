// The remote device and the ops server on 127.0.0.1 (src/remote, docs/remote.md): a server in
// this process, clients as remote:127.0.0.1:PORT/cpu devices and raw protocol stubs. Results are
// compared with the local CPU bit for bit (the peer runs the CPU's kernels on the same inputs).
// The op-table parity suite on the remote device runs as ctest Remote.ParityOnRemoteCpu.
#ifdef ALK_HAVE_REMOTE
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "alk/compile.h"
#include "alk/op_registry.h"
#include "alk/nn.h"
#include "alk/optim.h"
#include "alk/user_kernel.h"
#include "io/json.h"
#include "opspecs/op_specs.h"
#include "remote/client.h"
#include "remote/remote_device.h"
#include "remote/server.h"
#include "remote/tensor_message.h"
#include "remote/wire.h"
#include "testing.h"

namespace alk::remote {
namespace {

const std::string kToken = "test-token-aaaaaaaaaaaaaaaa";
const std::string kOtherToken = "test-token-bbbbbbbbbbbbbbbb";

ServerOptions two_token_options() {
  ServerOptions o;
  o.tokens.push_back({kToken});
  o.tokens.push_back({kOtherToken, {"cpu"}, 1 << 20});  // 1 MiB quota
  return o;
}

ClientOptions client_with(const std::string& token, double timeout = 30) {
  ClientOptions c;
  c.token = token;
  c.timeout_seconds = timeout;
  return c;
}

std::unique_ptr<RemoteDevice> connect(const Server& s, const std::string& token = kToken, double timeout = 30) {
  return std::make_unique<RemoteDevice>(RemoteAddress{"127.0.0.1", s.port(), "cpu"}, client_with(token, timeout));
}

// A raw stub, to send what the device never would.
struct RawClient {
  RawClient(int port, const std::string& token_)
      : stub(Remote::NewStub(make_channel("127.0.0.1:" + std::to_string(port), client_with(token_), kDefaultMaxMessageBytes))),
        token(token_) {}
  std::unique_ptr<grpc::ClientContext> context() const {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->AddMetadata("authorization", "Bearer " + token);
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return ctx;
  }
  uint64_t open() {
    OpenRequest req;
    req.set_device("cpu");
    OpenReply reply;
    auto ctx = context();
    EXPECT_TRUE(stub->Open(ctx.get(), req, &reply).ok());
    return reply.session();
  }
  grpc::Status execute(uint64_t session, std::vector<Command> commands, BatchReply& reply) {
    Batch b;
    b.set_session(session);
    for (Command& c : commands) *b.add_commands() = std::move(c);
    auto ctx = context();
    return stub->Execute(ctx.get(), b, &reply);
  }
  std::unique_ptr<Remote::Stub> stub;
  std::string token;
};

Command allocate(uint64_t handle, uint64_t bytes) {
  Command c;
  c.mutable_allocate()->set_buffer(handle);
  c.mutable_allocate()->set_bytes(bytes);
  return c;
}

std::vector<float> on_cpu(const Tensor& t) { return t.to(cpu_device()).to_vector<float>(); }

TEST(Remote, NamesParseWithDefaultsAndBadOnesAreErrors) {
  RemoteAddress a = parse_remote_name("remote:10.0.0.2:7000/cuda:0");
  EXPECT_EQ(a.host, "10.0.0.2");
  EXPECT_EQ(a.port, 7000);
  EXPECT_EQ(a.device, "cuda:0");
  EXPECT_EQ(parse_remote_name("remote:host").name(), "remote:host:50051/cpu");
  EXPECT_EQ(parse_remote_name("remote:[::1]:9/cpu").target(), "[::1]:9");
  for (const char* bad : {"remote:", "remote::80/cpu", "remote:h:0/cpu", "remote:h:99999/cpu", "remote:h:8x/cpu", "remote:h:1/"})
    EXPECT_THROW(parse_remote_name(bad), Error) << bad;
}

TEST(Remote, ProgramsAndGradientsGiveTheCpusBits) {
  Server server(two_token_options());
  auto dev = connect(server);
  manual_seed(3);
  const Tensor a = randn({33, 17}), b = randn({17, 9}), bias = randn({9});
  auto program = [](const Tensor& x, const Tensor& w, const Tensor& c) {
    return softmax(gelu(matmul(x, w) + c), 1) * 2.0 + sum(x, {1}, true).slice(0, 0, 33).expand({33, 9});
  };
  const Tensor want = program(a, b, bias);
  const Tensor got = program(a.to(*dev), b.to(*dev), bias.to(*dev));
  EXPECT_EQ(&got.device(), static_cast<Device*>(dev.get()));
  EXPECT_EQ(on_cpu(got), want.to_vector<float>());

  auto grad_on = [&](Device& d) {
    Tensor w = a.to(d).detach().requires_grad_();
    sum(tanh(w) * w + layer_norm(w, {17})).backward();
    return on_cpu(w.grad());
  };
  EXPECT_EQ(grad_on(*dev), grad_on(cpu_device()));
  // Random numbers are made on the peer from the same Philox stream.
  manual_seed(11);
  const std::vector<float> r_local = rand({64}).to_vector<float>();
  manual_seed(11);
  EXPECT_EQ(on_cpu(rand({64}, DType::F32).to(*dev) * 1.0), r_local);
}

// A download answered from a queued upload (no round trip) only while nothing queued after
// the upload may have written the buffer.
TEST(Remote, DownloadsOfQueuedUploadsStayCorrect) {
  Server server(two_token_options());
  auto dev = connect(server);
  const std::vector<float> a{1, 2, 3, 4}, b{5, 6, 7, 8};
  auto x = dev->allocate(16), y = dev->allocate(16);
  std::vector<float> got(4);
  dev->upload(*x, 0, a.data(), 16);
  int64_t trips = dev->round_trips();
  dev->download(*x, 0, got.data(), 16);
  EXPECT_EQ(got, a);
  EXPECT_EQ(dev->round_trips(), trips) << "read from the queued upload";
  dev->upload(*y, 0, b.data(), 16);
  dev->copy(*y, 0, *x, 0, 16);  // queued after x's upload: x must come from the peer
  dev->download(*x, 4, got.data(), 8);
  EXPECT_EQ(got[0], 6.0f);
  EXPECT_EQ(got[1], 7.0f);
  EXPECT_EQ(dev->round_trips(), trips + 1);
  dev->upload(*x, 0, a.data(), 8);  // a partial upload does not cover bytes 8..16
  dev->download(*x, 4, got.data(), 8);
  EXPECT_EQ(got[0], 2.0f);
  EXPECT_EQ(got[1], 7.0f);
  EXPECT_EQ(dev->round_trips(), trips + 2);
}

TEST(Remote, ThroughTheRegistryWithTheTokenFile) {
  Server server(two_token_options());
  const std::string dir = ::testing::TempDir() + "alk_remote_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/token") << kToken << "\n";
  setenv("ALK_REMOTE_TOKEN_FILE", (dir + "/token").c_str(), 1);
  const std::string name = "remote:127.0.0.1:" + std::to_string(server.port()) + "/cpu";
  Device& dev = get_device(name);
  EXPECT_EQ(&get_device(name), &dev) << "made once, then found";
  EXPECT_EQ(dev.info().kind, "remote");
  EXPECT_NE(&get_device("auto"), &dev) << "a peer is never 'auto'";
  const Tensor x = arange(0, 10, 1, DType::F32);
  EXPECT_EQ(on_cpu(x.to(name) * 3.0), (x * 3.0).to_vector<float>());
  unsetenv("ALK_REMOTE_TOKEN_FILE");
  std::filesystem::remove_all(dir);
}

// 20 compiled AdamW steps of a small GPT (dropout on): the losses of the steps replayed on the
// peer are the local CPU's, bit for bit; a step and the read of its loss are one round trip.
TEST(Remote, CompiledGptStepsGiveTheCpusLossesAndReplaysAreBatched) {
  Server server(two_token_options());
  auto dev = connect(server);
  auto losses = [](Device& d, int64_t* trips_per_step, RemoteDevice* counted) {
    DeviceGuard on(d);
    manual_seed(7);
    nn::GPTConfig cfg;
    cfg.vocab = 64, cfg.ctx = 32, cfg.dim = 32, cfg.heads = 2, cfg.layers = 2, cfg.dropout = 0.1;
    nn::GPT model(cfg);
    optim::AdamW opt(model.named_parameters(), 3e-3);
    Program step = testing::compiled_lm_step(model, opt);
    std::vector<int64_t> ids(4 * 32), next(4 * 32);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * 7) % 64), next[i] = (ids[i] + 1) % 64;
    const Tensor x = tensor(ids, {4, 32}), y = tensor(next, {4, 32});
    std::vector<float> out;
    for (int s = 0; s < 20; ++s) {
      const int64_t before = counted ? counted->round_trips() : 0;
      step({x, y});
      const int64_t after_step = counted ? counted->round_trips() : 0;
      out.push_back(static_cast<float>(step.captured("loss").item()));
      if (counted && s == 19) trips_per_step[0] = after_step - before, trips_per_step[1] = counted->round_trips() - after_step;
    }
    return out;
  };
  int64_t trips[2] = {-1, -1};
  const std::vector<float> local = losses(cpu_device(), nullptr, nullptr);
  const std::vector<float> far = losses(*dev, trips, dev.get());
  ASSERT_EQ(local.size(), far.size());
  EXPECT_EQ(std::memcmp(local.data(), far.data(), local.size() * sizeof(float)), 0)
      << "first loss local " << local[0] << " remote " << far[0];
  EXPECT_LT(local.back(), local.front());
  EXPECT_EQ(trips[0], 0) << "a replayed step is queued, not sent";
  // The read: Program::captured copies the loss through host memory (one download, sending the
  // step with it; the upload of the copy is queued), then item() reads the copy from the queued
  // upload.
  EXPECT_EQ(trips[1], 1) << "reading the loss";
}

// Two clients (two sessions) driving the same server from two threads at once: each gets the
// CPU's bits (the server runs one batch at a time on a device).
TEST(Remote, TwoClientsAtOnceEachGetTheirOwnResults) {
  Server server(two_token_options());
  auto first = connect(server), second = connect(server);
  manual_seed(21);
  const Tensor a = randn({64, 48}), b = randn({48, 32});
  const std::vector<float> want = (relu(matmul(a, b)) * 0.5).to_vector<float>();
  std::vector<std::vector<float>> got(2);
  auto work = [&](RemoteDevice& dev, std::vector<float>& out) {
    for (int i = 0; i < 10; ++i) out = on_cpu(relu(matmul(a.to(dev), b.to(dev))) * 0.5);
  };
  std::thread t1(work, std::ref(*first), std::ref(got[0]));
  std::thread t2(work, std::ref(*second), std::ref(got[1]));
  t1.join();
  t2.join();
  EXPECT_EQ(got[0], want);
  EXPECT_EQ(got[1], want);
  EXPECT_EQ(server.open_sessions(), 2u);
}

TEST(Remote, TokensAreCheckedMissingWrongAndPerDevice) {
  Server server(two_token_options());
  try {
    connect(server, "test-token-wrongwrongwrong");
    ADD_FAILURE() << "a wrong token was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("127.0.0.1"), std::string::npos) << "names the peer: " << e.what();
  }
  EXPECT_THROW(connect(server, ""), Error);
  // No metadata at all.
  RawClient raw(server.port(), kToken);
  grpc::ClientContext bare;
  OpenRequest req;
  OpenReply reply;
  EXPECT_EQ(raw.stub->Open(&bare, req, &reply).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  // The second token may open "cpu" only.
  RawClient other(server.port(), kOtherToken);
  auto ctx = other.context();
  req.set_device("nonexistent:3");
  EXPECT_FALSE(other.stub->Open(ctx.get(), req, &reply).ok());
  // A remote: name would have the server connect where the client says: never made.
  auto ctx2 = raw.context();
  req.set_device("remote:127.0.0.1:" + std::to_string(server.port()) + "/cpu");
  EXPECT_EQ(raw.stub->Open(ctx2.get(), req, &reply).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(server.open_sessions(), 0u);
}

TEST(Remote, ClientsCannotSeeEachOthersSessionsOrBuffers) {
  Server server(two_token_options());
  RawClient a(server.port(), kToken), b(server.port(), kOtherToken);
  const uint64_t sa = a.open(), sb = b.open();
  BatchReply reply;
  ASSERT_TRUE(a.execute(sa, {allocate(1, 64)}, reply).ok());
  EXPECT_EQ(reply.failed_command(), -1);
  // b names a's session: refused as if it did not exist.
  Command read;
  read.mutable_download()->set_buffer(1);
  read.mutable_download()->set_bytes(64);
  EXPECT_EQ(b.execute(sa, {read}, reply).error_code(), grpc::StatusCode::NOT_FOUND);
  // b names a's buffer handle in its own session: no such buffer there.
  ASSERT_TRUE(b.execute(sb, {read}, reply).ok());
  EXPECT_EQ(reply.failed_command(), 0);
  EXPECT_NE(reply.error().find("no buffer 1"), std::string::npos) << reply.error();
  // b's quota is 1 MiB.
  ASSERT_TRUE(b.execute(sb, {allocate(5, 2 << 20)}, reply).ok());
  EXPECT_NE(reply.error().find("quota"), std::string::npos) << reply.error();
  EXPECT_EQ(server.bytes_held(), 64u);
}

TEST(Remote, MalformedCommandsAreRefusedAndTheServerGoesOn) {
  Server server(two_token_options());
  RawClient raw(server.port(), kToken);
  const uint64_t s = raw.open();
  BatchReply reply;
  ASSERT_TRUE(raw.execute(s, {allocate(1, 64), allocate(2, 64)}, reply).ok());
  ASSERT_EQ(reply.failed_command(), -1);
  auto expect_refused = [&](Command c, const std::string& why) {
    BatchReply r;
    ASSERT_TRUE(raw.execute(s, {std::move(c)}, r).ok());
    EXPECT_EQ(r.failed_command(), 0) << why;
    EXPECT_NE(r.error().find(why), std::string::npos) << r.error();
  };
  // A kernel that is fine: 16 floats of buffer 1 doubled into buffer 2.
  auto good_kernel = [] {
    expr::Builder bld;
    const int x = bld.input(0, expr::Type::F32);
    const expr::Expr e = bld.finish(bld.binary(expr::Fn::Mul, x, bld.constant(2, expr::Type::F32)));
    KernelMsg k;
    k.set_op(static_cast<uint32_t>(OpId::Map));
    k.set_node_op(static_cast<uint32_t>(OpId::Map));
    k.mutable_params()->set_kind(1);
    for (const expr::Node& n : e.nodes) {
      ExprNode* m = k.mutable_params()->mutable_expr()->add_nodes();
      m->set_fn(static_cast<uint32_t>(n.fn)), m->set_type(static_cast<uint32_t>(n.type)), m->set_slot(n.slot);
      m->set_value(n.value);
      for (int a : n.args) m->add_args(a);
    }
    *k.mutable_expr() = k.params().expr();
    k.add_shape(16);
    ArgMsg arg;
    arg.set_dtype(static_cast<uint32_t>(DType::F32));
    arg.add_shape(16);
    arg.add_strides(1);
    arg.set_buffer(1);
    *k.add_inputs() = arg;
    arg.set_buffer(2);
    *k.mutable_output() = arg;
    return k;
  };
  auto launch = [](KernelMsg k) {
    Command c;
    *c.mutable_launch()->mutable_kernel() = std::move(k);
    return c;
  };
  {
    BatchReply r;
    ASSERT_TRUE(raw.execute(s, {launch(good_kernel())}, r).ok());
    EXPECT_EQ(r.failed_command(), -1) << r.error();
  }
  KernelMsg k = good_kernel();
  k.mutable_inputs(0)->set_shape(0, 17), k.mutable_output()->set_shape(0, 17);
  k.set_shape(0, 17);
  expect_refused(launch(k), "a window reaching byte 68 of a 64-byte buffer");
  k = good_kernel();
  k.mutable_inputs(0)->set_strides(0, -1);
  expect_refused(launch(k), "before its buffer");
  k = good_kernel();
  k.mutable_inputs(0)->set_buffer(99);
  expect_refused(launch(k), "no buffer 99");
  k = good_kernel();
  k.set_op(60000);
  expect_refused(launch(k), "op 60000");
  k = good_kernel();
  k.mutable_expr()->mutable_nodes(0)->set_slot(3);
  expect_refused(launch(k), "input slot 3");
  k = good_kernel();
  k.mutable_expr()->mutable_nodes(2)->set_args(0, 2);
  expect_refused(launch(k), "reads node 2");
  k = good_kernel();
  k.mutable_expr()->mutable_nodes(1)->set_fn(250);
  expect_refused(launch(k), "expression function 250");
  k = good_kernel();
  k.mutable_inputs(0)->set_dtype(77);
  expect_refused(launch(k), "dtype 77");
  k = good_kernel();
  k.mutable_inputs(0)->clear_strides();
  expect_refused(launch(k), "strides");
  k = good_kernel();
  k.mutable_inputs(0)->set_shape(0, 8);
  expect_refused(launch(k), "a Map input of shape [8]");
  k = good_kernel();
  k.mutable_params()->set_kind(15);
  expect_refused(launch(k), "params kind 15");
  {  // a matmul whose operands disagree with its output: refused before the CPU's kernel sees it
    KernelMsg mm = good_kernel();
    mm.set_op(static_cast<uint32_t>(OpId::Matmul));
    mm.set_node_op(static_cast<uint32_t>(OpId::Matmul));
    mm.mutable_params()->Clear();
    mm.clear_expr();
    for (ArgMsg* arg : {mm.mutable_inputs(0), mm.mutable_output()}) {
      arg->clear_shape(), arg->clear_strides();
      for (int64_t d : {4, 4}) arg->add_shape(d);
      for (int64_t st : {4, 1}) arg->add_strides(st);
    }
    ArgMsg b = mm.inputs(0);
    b.set_shape(0, 2), b.set_shape(1, 8), b.set_strides(0, 8);  // [2, 8]: k = 4 against 2
    *mm.add_inputs() = b;
    expect_refused(launch(mm), "a matmul [4, 4] x [2, 8] -> [4, 4]");
  }
  expect_refused(allocate(3, 1ull << 62), "quota");
  expect_refused(allocate(1, 8), "in use");
  Command up;
  up.mutable_upload()->set_buffer(1);
  up.mutable_upload()->set_offset(60);
  up.mutable_upload()->set_data(std::string(8, 'x'));
  expect_refused(up, "an upload of 8 bytes at offset 60");
  Command down;
  down.mutable_download()->set_buffer(1);
  down.mutable_download()->set_offset(~0ull);
  down.mutable_download()->set_bytes(2);
  expect_refused(down, "a download");
  Command cp;
  cp.mutable_copy()->set_src(1), cp.mutable_copy()->set_dst(2), cp.mutable_copy()->set_bytes(65);
  expect_refused(cp, "a copy's source");
  Command replay;
  replay.mutable_replay()->set_recording(42);
  expect_refused(replay, "no recording 42");
  expect_refused(Command(), "an empty command");
  // A batch asking to download more than a message carries is refused whole.
  Command big;
  big.mutable_download()->set_buffer(1);
  big.mutable_download()->set_bytes(1ull << 40);
  BatchReply r;
  EXPECT_EQ(raw.execute(s, {big}, r).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // Still serving: the good kernel runs and its result reads back.
  Command up_ok;
  up_ok.mutable_upload()->set_buffer(1);
  std::vector<float> ones(16, 1.5f);
  up_ok.mutable_upload()->set_data(ones.data(), 64);
  Command read;
  read.mutable_download()->set_buffer(2);
  read.mutable_download()->set_bytes(64);
  ASSERT_TRUE(raw.execute(s, {up_ok, launch(good_kernel()), read}, r).ok());
  ASSERT_EQ(r.failed_command(), -1) << r.error();
  std::vector<float> got(16);
  std::memcpy(got.data(), r.downloads(0).data(), 64);
  EXPECT_EQ(got, std::vector<float>(16, 3.0f));
}

TEST(Remote, ErrorsOfThePeerComeBackWithItsMessageAndTheCallersLine) {
  Server server(two_token_options());
  auto dev = connect(server, kOtherToken);  // 1 MiB quota
  EXPECT_THROW(dev->allocate(2 << 20), Error);
  // An index out of range is found by the peer's kernel and reported at the read.
  const Tensor x = ones({4, 3}).to(*dev);
  const Tensor idx = tensor(std::vector<int64_t>{0, 7}, {2}).to(*dev);
  try {
    (void)index_select(x, 0, idx).to_vector<float>();
    ADD_FAILURE() << "an out-of-range index was not reported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("remote:127.0.0.1"), std::string::npos) << e.what();
  }
  // The device goes on working after the error.
  EXPECT_EQ(on_cpu(x * 2.0), std::vector<float>(12, 2.0f));
}

// A user kernel's C++ body would be compiled and run by the server's process: a token would
// be code execution on the peer. The device refuses it (a clear error, nothing sent), and a
// server refuses a KernelMsg of one that a client sends anyway.
TEST(Remote, UserKernelsAreRefused) {
  Server server(two_token_options());
  auto dev = connect(server);
  KernelSpec spec;
  spec.name = "remote_axpy";
  spec.inputs = {{"x", DType::F32}};
  spec.output = {"res", DType::F32};
  spec.body[int(KernelTarget::Cpp)] = "res[i] = 2 * x[i];";
  const UserKernel k(std::move(spec));
  EXPECT_EQ(on_cpu(k({ones({5})}, {})), std::vector<float>(5, 2.0f));  // runs on the CPU
  const Tensor x = ones({5}).to(*dev);
  try {
    (void)k({x}, {}).to_vector<float>();
    ADD_FAILURE() << "a user kernel ran on a remote device";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("remote"), std::string::npos) << e.what();
  }
  KernelMsg m;
  m.set_op(static_cast<uint32_t>(OpId::UserKernel));
  m.set_node_op(static_cast<uint32_t>(OpId::UserKernel));
  EXPECT_THROW(decode_kernel(m, [](uint64_t) { return std::shared_ptr<Buffer>(); }), Error);
  EXPECT_EQ(on_cpu(x * 3.0), std::vector<float>(5, 3.0f));  // the device goes on working
}

TEST(Remote, APeerThatGoesAwayGivesAnErrorWithinTheTimeoutNotAHang) {
  auto server = std::make_unique<Server>(two_token_options());
  auto dev = connect(*server, kToken, 3);
  const Tensor x = ones({8}).to(*dev);
  EXPECT_EQ(on_cpu(x + 1.0), std::vector<float>(8, 2.0f));
  server->shutdown(0);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    (void)(x + 1.0).to_vector<float>();
    ADD_FAILURE() << "a dead peer answered";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("127.0.0.1"), std::string::npos) << what;
    EXPECT_NE(what.find("launch of Map"), std::string::npos) << "names the op: " << what;
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
}

TEST(Remote, ARestartedServerIsReportedNotRetried) {
  auto server = std::make_unique<Server>(two_token_options());
  const int port = server->port();
  auto dev = connect(*server);
  const Tensor x = ones({8}).to(*dev);
  server.reset();
  ServerOptions again = two_token_options();
  again.port = port;
  Server restarted(again);
  try {
    (void)(x * 2.0).to_vector<float>();
    ADD_FAILURE() << "the old session's buffers were used on a new server";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("restarted"), std::string::npos) << e.what();
  }
}

TEST(Remote, ASilentClientsSessionIsFreedWhenItsLeaseEnds) {
  ServerOptions o = two_token_options();
  o.lease_seconds = 0.5;
  Server server(o);
  {
    RawClient raw(server.port(), kToken);
    const uint64_t s = raw.open();
    BatchReply reply;
    ASSERT_TRUE(raw.execute(s, {allocate(1, 4096)}, reply).ok());
    EXPECT_EQ(server.bytes_held(), 4096u);
  }
  // A device keeps its own session alive by pinging while it is silent.
  auto dev = connect(server);
  {
    const Tensor kept = ones({16}).to(*dev);
    kept.realize();
    for (int i = 0; i < 40 && server.open_sessions() > 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_EQ(server.open_sessions(), 1u) << "the raw client's session ended, the device's lives";
    std::this_thread::sleep_for(std::chrono::milliseconds(1200));
    EXPECT_EQ(on_cpu(kept), std::vector<float>(16, 1.0f));
  }
  dev.reset();  // after its tensors, as a device outlives its buffers
  EXPECT_EQ(server.open_sessions(), 0u) << "a closed device's session is gone at once";
  EXPECT_EQ(server.bytes_held(), 0u);
}

TEST(Remote, TokenFilesAreParsedAndBadOnesNamed) {
  const std::string path = ::testing::TempDir() + "alk_tokens_" + std::to_string(getpid());
  std::ofstream(path) << "# tokens\n" << kToken << "\n" << kOtherToken << " devices=cpu,cuda:0 max_bytes=1024\n";
  auto grants = read_token_file(path);
  ASSERT_EQ(grants.size(), 2u);
  EXPECT_EQ(grants[1].devices, (std::vector<std::string>{"cpu", "cuda:0"}));
  EXPECT_EQ(grants[1].max_bytes, 1024u);
  std::ofstream(path) << "short\n";
  EXPECT_THROW(read_token_file(path), Error);
  std::ofstream(path) << kToken << " colour=blue\n";
  EXPECT_THROW(read_token_file(path), Error);
  std::filesystem::remove(path);
  ServerOptions none;
  EXPECT_THROW(Server{none}, Error) << "a server never runs without a token";
}

// TLS with a certificate made here for 127.0.0.1 (openssl, a Debian package `make deps` installs):
// a client trusting it runs a program; a plain-TCP client is refused at the handshake.
TEST(Remote, TlsConnectsWithTheCertificateAndRefusesPlainClients) {
  const std::string dir = ::testing::TempDir() + "alk_tls_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  const std::string cmd = "openssl req -x509 -newkey rsa:2048 -nodes -keyout " + dir + "/key.pem -out " + dir +
                          "/cert.pem -days 2 -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 > " + dir +
                          "/openssl.log 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "openssl could not make a certificate: " << cmd;
  ServerOptions o = two_token_options();
  o.tls_cert_file = dir + "/cert.pem";
  o.tls_key_file = dir + "/key.pem";
  Server server(o);
  ClientOptions c = client_with(kToken, 10);
  std::ifstream in(dir + "/cert.pem");
  c.tls_ca_pem.assign(std::istreambuf_iterator<char>(in), {});
  {
    RemoteDevice dev(RemoteAddress{"127.0.0.1", server.port(), "cpu"}, c);
    const Tensor x = arange(0, 6, 1, DType::F32);
    EXPECT_EQ(on_cpu(x.to(dev) * 2.0), (x * 2.0).to_vector<float>());
  }
  EXPECT_THROW(RemoteDevice(RemoteAddress{"127.0.0.1", server.port(), "cpu"}, client_with(kToken, 5)), Error);
  std::filesystem::remove_all(dir);
}

// ---- the operations registry ----

TEST(OpsRegistry, CoversEveryOpOfTheTable) {
  const json::Value all = json::parse(opspecs::op_specs_json());
  const json::Array& kernels = all.at("kernels").as_array();
  ASSERT_EQ(kernels.size(), static_cast<size_t>(kNumOps));
  for (int i = 0; i < kNumOps; ++i) {
    const auto op = static_cast<OpId>(i);
    EXPECT_EQ(kernels[i].at("name").as_string(), op_name(op));
    // Every elementwise op and every differentiable template op is callable by name.
    const bool callable_expected = is_elementwise(op) || (op_differentiable(op) && op_needs_backend_kernel(op) &&
                                                           op != OpId::SliceScatter && op != OpId::Unfold && op != OpId::Fold);
    if (callable_expected) {
      EXPECT_FALSE(kernels[i].at("called_by").as_array().empty()) << op_name(op) << " has no callable op";
    }
  }
  const json::Value schema = json::parse(opspecs::op_schema_json("layer_norm"));
  EXPECT_EQ(schema.at("$schema").as_string(), "https://json-schema.org/draft/2020-12/schema");
  const json::Value& attrs = schema.at("properties").at("attributes");
  EXPECT_EQ(attrs.at("required").as_array(), json::Array{json::Value("normalized_shape")});
  EXPECT_EQ(attrs.at("properties").at("eps").at("default").as_double(), 1e-5);
  EXPECT_THROW(opspecs::op_schema_json("no_such_op"), Error);
}

TEST(OpsRegistry, CallsCheckTheirInputsAndAttributes) {
  manual_seed(5);
  const Tensor a = randn({3, 4}), b = randn({4, 2});
  EXPECT_EQ(opspecs::call_op("matmul", {a, b}, "").to_vector<float>(), matmul(a, b).to_vector<float>());
  EXPECT_EQ(opspecs::call_op("softmax", {a}, R"({"dim": 0})").to_vector<float>(), softmax(a, 0).to_vector<float>());
  EXPECT_EQ(opspecs::call_op("sum", {a}, R"({"axes": [1], "keepdim": true})").to_vector<float>(),
            sum(a, {1}, true).to_vector<float>());
  EXPECT_EQ(opspecs::call_op("relu", {a}, "").to_vector<float>(), relu(a).to_vector<float>());
  EXPECT_THROW(opspecs::call_op("softmax", {a}, ""), Error) << "dim is required";
  EXPECT_THROW(opspecs::call_op("softmax", {a}, R"({"dim": 1.5})"), Error);
  EXPECT_THROW(opspecs::call_op("softmax", {a}, R"({"dim": 0, "colour": 1})"), Error);
  EXPECT_THROW(opspecs::call_op("matmul", {a}, ""), Error);
  EXPECT_THROW(opspecs::call_op("gather", {a, a}, R"({"dim": 0})"), Error) << "index must be integer";
  EXPECT_THROW(opspecs::call_op("relu", {a}, "[1]"), Error);
}

TEST(OpsRegistry, OpsAreCalledByNameOnAPeer) {
  Server server(two_token_options());
  OpsClient peer("127.0.0.1:" + std::to_string(server.port()), client_with(kToken));
  manual_seed(6);
  const Tensor a = randn({5, 7}), b = randn({7, 3});
  EXPECT_EQ(peer.call("matmul", {a, b}).to_vector<float>(), matmul(a, b).to_vector<float>());
  EXPECT_EQ(peer.call("log_softmax", {a}, R"({"dim": -1})").to_vector<float>(), log_softmax(a, -1).to_vector<float>());
  const Tensor ids = tensor(std::vector<int64_t>{2, 0, 4}, {3});
  EXPECT_EQ(peer.call("embedding", {a, ids}).to_vector<float>(), embedding(a, ids).to_vector<float>());
  EXPECT_NE(peer.list_ops().find("\"scaled_dot_product_attention\""), std::string::npos);
  EXPECT_NE(peer.describe("matmul").find("prefixItems"), std::string::npos);
  try {
    peer.call("softmax", {a}, R"({"dim": 5})");
    ADD_FAILURE() << "dim 5 of a 2-D tensor was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("softmax"), std::string::npos) << e.what();
  }
  OpsClient stranger("127.0.0.1:" + std::to_string(server.port()), client_with("test-token-nobodynobodynobody"));
  EXPECT_THROW(stranger.list_ops(), Error);
  EXPECT_THROW(stranger.call("matmul", {a, b}), Error);
  // A tensor message whose bytes do not match its shape.
  TensorMsg bad;
  bad.set_dtype(static_cast<uint32_t>(DType::F32));
  bad.add_shape(1000);
  bad.set_data("xy");
  EXPECT_THROW(tensor_from_message(bad), Error);
}

}  // namespace
}  // namespace alk::remote
#endif  // ALK_HAVE_REMOTE
