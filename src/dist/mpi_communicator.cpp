// MPI through OpenMPI's libmpi.so.40, opened with dlopen (Debian's openmpi-bin /
// libopenmpi3): alk needs no MPI to build or to start. OpenMPI's handles (MPI_COMM_WORLD,
// MPI_FLOAT, MPI_SUM, ...) are addresses of global objects in the library (ompi_mpi_*), so
// they are looked up by name; the few functions used are declared here with their C types.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "dist/communicator.h"

namespace alk::dist {

namespace {

using Handle = void*;  // MPI_Comm, MPI_Datatype, MPI_Op, MPI_Errhandler: pointers in OpenMPI
void* const kInPlace = reinterpret_cast<void*>(1);  // OpenMPI's MPI_IN_PLACE
constexpr int kMaxErrorString = 256;                 // OpenMPI's MPI_MAX_ERROR_STRING
constexpr int kThreadSerialized = 2;                 // MPI_THREAD_SERIALIZED (the standard's order)

struct Mpi {
  void* lib = nullptr;
  int (*Init_thread)(int*, char***, int, int*) = nullptr;
  int (*Initialized)(int*) = nullptr;
  int (*Finalized)(int*) = nullptr;
  int (*Finalize)() = nullptr;
  int (*Abort)(Handle, int) = nullptr;
  int (*Comm_rank)(Handle, int*) = nullptr;
  int (*Comm_size)(Handle, int*) = nullptr;
  int (*Comm_set_errhandler)(Handle, Handle) = nullptr;
  int (*Error_string)(int, char*, int*) = nullptr;
  int (*Allreduce)(const void*, void*, int, Handle, Handle, Handle) = nullptr;
  int (*Iallreduce)(const void*, void*, int, Handle, Handle, Handle, Handle*) = nullptr;
  int (*Test)(Handle*, int*, void*) = nullptr;
  int (*Bcast)(void*, int, Handle, int, Handle) = nullptr;
  int (*Allgather)(const void*, int, Handle, void*, int, Handle, Handle) = nullptr;
  int (*Reduce_scatter_block)(const void*, void*, int, Handle, Handle, Handle) = nullptr;
  int (*Barrier)(Handle) = nullptr;
  Handle comm_world = nullptr, errors_return = nullptr;
  Handle t_byte = nullptr, t_float = nullptr, t_double = nullptr, t_int = nullptr, t_int64 = nullptr,
         t_uint8 = nullptr;
  Handle op_sum = nullptr, op_max = nullptr, op_min = nullptr;
  std::string error;  // why it could not be loaded
};

template <class F>
void bind(Mpi& m, F& f, const char* name) {
  f = reinterpret_cast<F>(dlsym(m.lib, name));
  if (!f && m.error.empty()) m.error = std::string("libmpi has no ") + name;
}
Handle object(Mpi& m, const char* name) {
  Handle h = dlsym(m.lib, name);
  if (!h && m.error.empty()) m.error = std::string("libmpi has no ") + name + " (not OpenMPI?)";
  return h;
}

Mpi& mpi() {
  static Mpi m = [] {
    Mpi m;
    const char* env = std::getenv("ALK_MPI_PATH");
    const std::string path = env && *env ? env : "libmpi.so.40";
    // RTLD_GLOBAL: OpenMPI's plugins (dlopened by it) resolve their symbols in libmpi.
    m.lib = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (!m.lib) {
      const char* e = dlerror();
      m.error = "cannot load " + path + " (" + (e ? e : "?") +
                "): install OpenMPI (Debian: apt-get install openmpi-bin libopenmpi-dev) or set ALK_MPI_PATH";
      return m;
    }
    bind(m, m.Init_thread, "MPI_Init_thread");
    bind(m, m.Initialized, "MPI_Initialized");
    bind(m, m.Finalized, "MPI_Finalized");
    bind(m, m.Finalize, "MPI_Finalize");
    bind(m, m.Abort, "MPI_Abort");
    bind(m, m.Comm_rank, "MPI_Comm_rank");
    bind(m, m.Comm_size, "MPI_Comm_size");
    bind(m, m.Comm_set_errhandler, "MPI_Comm_set_errhandler");
    bind(m, m.Error_string, "MPI_Error_string");
    bind(m, m.Allreduce, "MPI_Allreduce");
    bind(m, m.Iallreduce, "MPI_Iallreduce");
    bind(m, m.Test, "MPI_Test");
    bind(m, m.Bcast, "MPI_Bcast");
    bind(m, m.Allgather, "MPI_Allgather");
    bind(m, m.Reduce_scatter_block, "MPI_Reduce_scatter_block");
    bind(m, m.Barrier, "MPI_Barrier");
    m.comm_world = object(m, "ompi_mpi_comm_world");
    m.errors_return = object(m, "ompi_mpi_errors_return");
    m.t_byte = object(m, "ompi_mpi_byte");
    m.t_float = object(m, "ompi_mpi_float");
    m.t_double = object(m, "ompi_mpi_double");
    m.t_int = object(m, "ompi_mpi_int");
    m.t_int64 = object(m, "ompi_mpi_int64_t");
    m.t_uint8 = object(m, "ompi_mpi_uint8_t");
    m.op_sum = object(m, "ompi_mpi_op_sum");
    m.op_max = object(m, "ompi_mpi_op_max");
    m.op_min = object(m, "ompi_mpi_op_min");
    return m;
  }();
  return m;
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() {
    Mpi& m = mpi();
    if (!m.error.empty()) fail_collective("mpi", "open", m.error);
    int done = 0;
    m.Initialized(&done);
    // SERIALIZED: the gradient all-reduce runs on a communication thread during the backward
    // (overlap.cpp); the main thread calls MPI only after waiting for it.
    int provided = 0;
    if (!done) call("MPI_Init_thread", m.Init_thread(nullptr, nullptr, kThreadSerialized, &provided));
    serialized_ = provided >= kThreadSerialized;
    // Errors come back as codes (then alk::Error), not as MPI's default abort.
    call("MPI_Comm_set_errhandler", m.Comm_set_errhandler(m.comm_world, m.errors_return));
    call("MPI_Comm_rank", m.Comm_rank(m.comm_world, &rank_));
    call("MPI_Comm_size", m.Comm_size(m.comm_world, &size_));
  }
  ~MpiCommunicator() override {
    Mpi& m = mpi();
    int fin = 0;
    m.Finalized(&fin);
    if (!fin) m.Finalize();
  }
  std::string name() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_reduce(void* data, size_t count, DType dtype, ReduceOp op) override {
    Mpi& m = mpi();
    call("MPI_Allreduce", m.Allreduce(kInPlace, data, int_count(count), type(dtype, true), reduce_op(op),
                                      m.comm_world));
    if (op == ReduceOp::Avg) divide(data, count, dtype);
  }
  void all_reduce_sleeping(void* data, size_t count, DType dtype, ReduceOp op, int sleep_us) override {
    if (sleep_us <= 0) return all_reduce(data, count, dtype, op);
    Mpi& m = mpi();
    Handle request = nullptr;
    call("MPI_Iallreduce", m.Iallreduce(kInPlace, data, int_count(count), type(dtype, true), reduce_op(op),
                                        m.comm_world, &request));
    for (int done = 0;;) {
      call("MPI_Test", m.Test(&request, &done, nullptr));  // nullptr: OpenMPI's MPI_STATUS_IGNORE
      if (done) break;
      usleep(static_cast<useconds_t>(sleep_us));
    }
    if (op == ReduceOp::Avg) divide(data, count, dtype);
  }
  void broadcast(void* data, size_t count, DType dtype, int root) override {
    Mpi& m = mpi();
    call("MPI_Bcast", m.Bcast(data, int_count(count * dtype_size(dtype)), m.t_byte, root, m.comm_world));
  }
  void all_gather(const void* send, void* recv, size_t count, DType dtype) override {
    Mpi& m = mpi();
    const int n = int_count(count * dtype_size(dtype));
    call("MPI_Allgather", m.Allgather(send, n, m.t_byte, recv, n, m.t_byte, m.comm_world));
  }
  void reduce_scatter(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) override {
    Mpi& m = mpi();
    call("MPI_Reduce_scatter_block",
         m.Reduce_scatter_block(send, recv, int_count(count), type(dtype, true), reduce_op(op), m.comm_world));
    if (op == ReduceOp::Avg) divide(recv, count, dtype);
  }
  void barrier() override { call("MPI_Barrier", mpi().Barrier(mpi().comm_world)); }
  void abort() noexcept override { mpi().Abort(mpi().comm_world, 3); }
  bool serialized_threads() const override { return serialized_; }

 private:
  int rank_ = 0, size_ = 1;
  bool serialized_ = false;

  static int int_count(size_t n) {
    if (n > static_cast<size_t>(INT32_MAX)) fail_collective("mpi", "count", "more than 2^31 - 1 elements in one call");
    return static_cast<int>(n);
  }
  static void call(const char* what, int code) {
    if (code == 0) return;
    char text[kMaxErrorString] = {};
    int len = 0;
    mpi().Error_string(code, text, &len);
    fail_collective("mpi", what, std::string(text, static_cast<size_t>(len)));
  }
  static Handle type(DType d, bool arithmetic) {
    Mpi& m = mpi();
    switch (d) {
      case DType::F32: return m.t_float;
      case DType::F64: return m.t_double;
      case DType::I32: return m.t_int;
      case DType::I64: return m.t_int64;
      case DType::U8: return m.t_uint8;
      default: break;
    }
    if (!arithmetic) return m.t_byte;
    fail_collective("mpi", "reduce", std::string("no MPI reduction over ") + std::string(dtype_name(d)) +
                                         " (f32, f64, i32, i64, u8 reduce; convert first)");
  }
  static Handle reduce_op(ReduceOp op) {
    Mpi& m = mpi();
    switch (op) {
      case ReduceOp::Max: return m.op_max;
      case ReduceOp::Min: return m.op_min;
      default: return m.op_sum;
    }
  }
  void divide(void* data, size_t count, DType dtype) const {
    const double w = size_;
    switch (dtype) {
      case DType::F32: for (size_t i = 0; i < count; ++i) static_cast<float*>(data)[i] = static_cast<float>(static_cast<float*>(data)[i] / w); break;
      case DType::F64: for (size_t i = 0; i < count; ++i) static_cast<double*>(data)[i] /= w; break;
      case DType::I32: for (size_t i = 0; i < count; ++i) static_cast<int32_t*>(data)[i] /= size_; break;
      case DType::I64: for (size_t i = 0; i < count; ++i) static_cast<int64_t*>(data)[i] /= size_; break;
      default: fail_collective("mpi", "reduce", "no average over " + std::string(dtype_name(dtype)));
    }
  }
};

}  // namespace

std::unique_ptr<Communicator> open_mpi() { return std::make_unique<MpiCommunicator>(); }

}  // namespace alk::dist
