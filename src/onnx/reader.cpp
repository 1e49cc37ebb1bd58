// Reading .onnx files with Debian's generated classes (onnx-ml.pb.h, ONNX_ML=1) into ModelImpl.
// Everything in the file is untrusted: sizes are checked against the bytes that are present
// before any allocation, references between nodes must point backwards (which also rules out
// cycles), and external data must stay inside the model's directory.
#include <onnx/onnx_pb.h>  // defines ONNX_API, then includes onnx-ml.pb.h (ONNX_ML=1)
#include <onnx/onnx-data_pb.h>  // SequenceProto, OptionalProto (the test data of sequence and optional values)

#include <algorithm>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "alk/io.h"
#include "onnx/model.h"

namespace alk::onnx {

namespace {

constexpr const char* kOp = "onnx";

}  // namespace

bool dtype_from_onnx(int t, DType* out) {
  switch (t) {
    case ::onnx::TensorProto::FLOAT: *out = DType::F32; return true;
    case ::onnx::TensorProto::UINT8: *out = DType::U8; return true;
    case ::onnx::TensorProto::INT32: *out = DType::I32; return true;
    case ::onnx::TensorProto::INT64: *out = DType::I64; return true;
    case ::onnx::TensorProto::BOOL: *out = DType::Bool; return true;
    case ::onnx::TensorProto::FLOAT16: *out = DType::F16; return true;
    case ::onnx::TensorProto::DOUBLE: *out = DType::F64; return true;
    case ::onnx::TensorProto::BFLOAT16: *out = DType::BF16; return true;
    default: return false;
  }
}

int dtype_to_onnx(DType t) {
  switch (t) {
    case DType::F32: return ::onnx::TensorProto::FLOAT;
    case DType::U8: return ::onnx::TensorProto::UINT8;
    case DType::I32: return ::onnx::TensorProto::INT32;
    case DType::I64: return ::onnx::TensorProto::INT64;
    case DType::Bool: return ::onnx::TensorProto::BOOL;
    case DType::F16: return ::onnx::TensorProto::FLOAT16;
    case DType::F64: return ::onnx::TensorProto::DOUBLE;
    case DType::BF16: return ::onnx::TensorProto::BFLOAT16;
  }
  return 0;
}

std::string onnx_type_name(int t) {
  if (!::onnx::TensorProto::DataType_IsValid(t)) return "type" + std::to_string(t);
  std::string n = ::onnx::TensorProto::DataType_Name(static_cast<::onnx::TensorProto::DataType>(t));
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return n;
}

int64_t checked_numel(const Shape& shape, const std::string& what, Loc loc) {
  // Messages are built on failure only: this runs for every node output of every call.
  if (static_cast<int>(shape.size()) > kMaxRank) fail(kOp, loc, what, ": rank ", shape.size(), " exceeds ", kMaxRank);
  for (int64_t d : shape)
    if (d < 0) fail(kOp, loc, what, ": negative dim in ", to_string(shape));
  for (int64_t d : shape)
    if (d == 0) return 0;
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d > kMaxElements || n > kMaxElements / d)
      fail(kOp, loc, what, ": shape ", to_string(shape), " has more than ", kMaxElements, " elements");
    n *= d;
  }
  return n;
}

namespace {

// Bytes of an external-data tensor: `location` relative to base_dir, never leaving it.
std::string read_external(const ::onnx::TensorProto& p, const std::string& base_dir, size_t need, Loc loc) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : p.external_data()) {
    if (kv.key() == "location") location = kv.value();
    else if (kv.key() == "offset" || kv.key() == "length") {
      char* end = nullptr;
      errno = 0;
      long long v = std::strtoll(kv.value().c_str(), &end, 10);
      check(errno == 0 && end && *end == 0 && v >= 0 && !kv.value().empty(), kOp, loc, "tensor '", p.name(),
            "': external data ", kv.key(), " '", kv.value(), "' is not a non-negative integer");
      (kv.key() == "offset" ? offset : length) = v;
    }
  }
  check(!base_dir.empty(), kOp, loc, "tensor '", p.name(), "': external data is not allowed here (no model directory)");
  check(!location.empty(), kOp, loc, "tensor '", p.name(), "': external data without a location");
  const std::filesystem::path rel(location);
  check(rel.is_relative(), kOp, loc, "tensor '", p.name(), "': external data location '", location, "' is absolute");
  for (const auto& part : rel) check(part != "..", kOp, loc, "tensor '", p.name(), "': external data location '", location, "' leaves the model directory");
  const std::string path = (std::filesystem::path(base_dir) / rel).string();
  std::ifstream f(path, std::ios::binary);
  check(f.good(), kOp, loc, "tensor '", p.name(), "': cannot open external data file ", path);
  f.seekg(0, std::ios::end);
  const int64_t file_size = static_cast<int64_t>(f.tellg());
  if (length < 0) length = static_cast<int64_t>(need);
  check(length == static_cast<int64_t>(need), kOp, loc, "tensor '", p.name(), "': external data length ", length,
        " but the shape needs ", need, " bytes");
  check(offset <= file_size && length <= file_size - offset, kOp, loc, "tensor '", p.name(), "': external data [",
        offset, ", +", length, ") runs past the end of ", path, " (", file_size, " bytes)");
  std::string bytes(static_cast<size_t>(length), '\0');
  f.seekg(offset);
  f.read(bytes.data(), length);
  check(f.good() || length == 0, kOp, loc, "tensor '", p.name(), "': reading ", path, " failed");
  return bytes;
}

template <class Src, class Dst>
void widen(const Src& src, std::string* out) {
  out->resize(static_cast<size_t>(src.size()) * sizeof(Dst));
  for (int k = 0; k < src.size(); ++k) {
    Dst v = static_cast<Dst>(src.Get(k));
    std::memcpy(out->data() + static_cast<size_t>(k) * sizeof(Dst), &v, sizeof(Dst));
  }
}

Tensor tensor_from_proto(const ::onnx::TensorProto& p, const std::string& base_dir, Loc loc) {
  DType dt;
  if (!dtype_from_onnx(p.data_type(), &dt))
    fail(kUnsupported, loc, "tensor '", p.name(), "' has element type ", onnx_type_name(p.data_type()),
         ", which alk lacks");
  Shape shape(p.dims().begin(), p.dims().end());
  const int64_t n = checked_numel(shape, "tensor '" + p.name() + "'", loc);
  const size_t need = static_cast<size_t>(n) * dtype_size(dt);
  std::string bytes;
  if (p.data_location() == ::onnx::TensorProto::EXTERNAL) {
    bytes = read_external(p, base_dir, need, loc);
  } else if (p.has_raw_data()) {
    check(p.raw_data().size() == need, kOp, loc, "tensor '", p.name(), "': raw_data holds ", p.raw_data().size(),
          " bytes, shape ", to_string(shape), " of ", dtype_name(dt), " needs ", need);
    bytes = p.raw_data();
  } else {
    int64_t have = 0;
    switch (dt) {
      case DType::F32: have = p.float_data_size(); break;
      case DType::F64: have = p.double_data_size(); break;
      case DType::I64: have = p.int64_data_size(); break;
      default: have = p.int32_data_size(); break;
    }
    check(have == n, kOp, loc, "tensor '", p.name(), "': holds ", have, " values, shape ", to_string(shape), " needs ", n);
    switch (dt) {
      case DType::F32: widen<decltype(p.float_data()), float>(p.float_data(), &bytes); break;
      case DType::F64: widen<decltype(p.double_data()), double>(p.double_data(), &bytes); break;
      case DType::I64: widen<decltype(p.int64_data()), int64_t>(p.int64_data(), &bytes); break;
      case DType::I32: widen<decltype(p.int32_data()), int32_t>(p.int32_data(), &bytes); break;
      case DType::F16:
      case DType::BF16: widen<decltype(p.int32_data()), uint16_t>(p.int32_data(), &bytes); break;
      case DType::U8: widen<decltype(p.int32_data()), uint8_t>(p.int32_data(), &bytes); break;
      case DType::Bool:
        widen<decltype(p.int32_data()), uint8_t>(p.int32_data(), &bytes);
        for (char& b : bytes) b = b != 0;
        break;
    }
  }
  if (dt == DType::Bool)
    for (char& b : bytes) b = b != 0;
  DeviceGuard on_cpu(cpu_device());
  return from_bytes(bytes.data(), bytes.size(), shape, dt, loc);
}

// The kind and element type of a sequence or optional type ("sequence(float)"); Other for
// maps, sparse tensors and sequences of those.
void non_tensor_type(const ::onnx::TypeProto& t, ValueInfo* out, int depth = 0) {
  auto elem = [](const ::onnx::TypeProto& e) {
    return e.has_tensor_type() && e.tensor_type().elem_type() != 0 ? onnx_type_name(e.tensor_type().elem_type())
                                                                    : std::string("?");
  };
  if (t.has_sequence_type() && t.sequence_type().elem_type().has_tensor_type()) {
    out->kind = ValueInfo::Kind::Sequence;
    out->elem_type = "sequence(" + elem(t.sequence_type().elem_type()) + ")";
    return;
  }
  if (depth == 0 && t.has_optional_type()) {
    const auto& e = t.optional_type().elem_type();
    if (e.has_tensor_type()) {
      out->kind = ValueInfo::Kind::Optional;
      out->elem_type = "optional(" + elem(e) + ")";
      return;
    }
    non_tensor_type(e, out, depth + 1);
    if (out->kind == ValueInfo::Kind::Sequence) {
      out->kind = ValueInfo::Kind::Optional;
      out->elem_type = "optional(" + out->elem_type + ")";
      return;
    }
  }
  out->kind = ValueInfo::Kind::Other;
  out->elem_type = "non-tensor";
}

ValueInfo value_info(const ::onnx::ValueInfoProto& v) {
  ValueInfo out;
  out.name = v.name();
  out.elem_type = "?";
  if (v.type().has_tensor_type()) {
    const auto& tt = v.type().tensor_type();
    if (tt.elem_type() != 0) out.elem_type = onnx_type_name(tt.elem_type());
    if (tt.has_shape()) {
      out.has_shape = true;
      for (const auto& d : tt.shape().dim())
        out.dims.push_back(d.has_dim_value() ? std::to_string(d.dim_value()) : d.has_dim_param() ? d.dim_param() : "?");
    }
  } else if (v.has_type()) {
    non_tensor_type(v.type(), &out);
  }
  return out;
}

// The nodes of a graph (the model's or a subgraph's), every input defined before it is read:
// `defined` holds the graph's inputs, initializers and earlier outputs; `outer` the names of the
// scopes around it (a subgraph's nodes may read them). Names read from `outer` go to *free.
struct GraphReader {
  const std::string& base_dir;
  Loc loc;
  ModelInfo& info;

  Attr attr(const ::onnx::AttributeProto& a, const std::set<std::string>& visible, int depth,
            std::set<std::string>* free) {
    Attr out;
    using A = ::onnx::AttributeProto;
    switch (a.type()) {
      case A::FLOAT: out.kind = Attr::Float; out.f = a.f(); break;
      case A::INT: out.kind = Attr::Int; out.i = a.i(); break;
      case A::STRING: out.kind = Attr::String; out.s = a.s(); break;
      case A::TENSOR: out.kind = Attr::TensorValue; out.t = tensor_from_proto(a.t(), base_dir, loc); break;
      case A::FLOATS: out.kind = Attr::Floats; out.floats.assign(a.floats().begin(), a.floats().end()); break;
      case A::INTS: out.kind = Attr::Ints; out.ints.assign(a.ints().begin(), a.ints().end()); break;
      case A::STRINGS: out.kind = Attr::Strings; out.strings.assign(a.strings().begin(), a.strings().end()); break;
      case A::GRAPH: out.kind = Attr::GraphValue; out.graph = subgraph(a.g(), visible, depth + 1, free); break;
      default: out.kind = Attr::Other; break;  // lists of graphs, sparse tensors, type protos: no op alk imports reads them
    }
    return out;
  }

  std::shared_ptr<Graph> subgraph(const ::onnx::GraphProto& g, const std::set<std::string>& outer, int depth,
                                  std::set<std::string>* free) {
    check(depth <= kMaxGraphDepth, kOp, loc, "subgraphs nested deeper than ", kMaxGraphDepth);
    auto out = std::make_shared<Graph>();
    std::set<std::string> defined;
    for (const auto& init : g.initializer()) {
      check(!init.name().empty() && !defined.count(init.name()), kOp, loc, "subgraph initializer '", init.name(),
            "' has no name or is defined twice");
      out->initializers.emplace(init.name(), tensor_from_proto(init, base_dir, loc));
      defined.insert(init.name());
    }
    for (const auto& in : g.input()) {
      check(!in.name().empty() && !defined.count(in.name()), kOp, loc, "subgraph input '", in.name(),
            "' has no name or is declared twice");
      out->input_names.push_back(in.name());
      defined.insert(in.name());
    }
    out->nodes = nodes(g.node(), defined, outer, depth, free);
    for (const auto& o : g.output()) {
      const bool inside = defined.count(o.name()) != 0;
      check(inside || outer.count(o.name()), kOp, loc, "subgraph output '", o.name(), "' is never computed");
      if (!inside) free->insert(o.name());
      out->output_names.push_back(o.name());
    }
    return out;
  }

  std::vector<Node> nodes(const google::protobuf::RepeatedPtrField<::onnx::NodeProto>& protos,
                          std::set<std::string>& defined, const std::set<std::string>& outer, int depth,
                          std::set<std::string>* free) {
    std::vector<Node> out;
    for (const auto& np : protos) {
      Node n;
      n.op_type = np.op_type();
      n.domain = np.domain() == "ai.onnx" ? "" : np.domain();
      n.name = np.name();
      const std::string label = "node '" + n.name + "' (" + n.op_type + ")";
      auto read = [&](const std::string& name) {
        if (name.empty() || defined.count(name)) return;
        check(outer.count(name), kOp, loc, label, ": input '", name,
              "' is not a graph input, an initializer or an output of an earlier node (missing, or a cycle)");
        free->insert(name);
      };
      for (const auto& in : np.input()) {
        read(in);
        n.inputs.push_back(in);
      }
      // What this node's subgraphs see: everything defined so far, here and around.
      std::set<std::string> visible;
      if (std::any_of(np.attribute().begin(), np.attribute().end(),
                      [](const auto& a) { return a.type() == ::onnx::AttributeProto::GRAPH; })) {
        visible = outer;
        visible.insert(defined.begin(), defined.end());
      }
      std::set<std::string> node_free;
      for (const auto& a : np.attribute()) {
        check(!n.attrs.count(a.name()), kOp, loc, label, ": attribute '", a.name(), "' given twice");
        n.attrs.emplace(a.name(), attr(a, visible, depth, &node_free));
      }
      for (const auto& name : node_free) {
        read(name);
        n.outer_names.push_back(name);
      }
      for (const auto& o : np.output()) {
        check(o.empty() || !defined.count(o), kOp, loc, label, ": output '", o, "' is already defined");
        if (!o.empty()) defined.insert(o);
        n.outputs.push_back(o);
      }
      const std::string key = n.domain.empty() ? n.op_type : n.domain + ":" + n.op_type;
      info.op_histogram[key]++;
      out.push_back(std::move(n));
    }
    return out;
  }
};

std::shared_ptr<ModelImpl> convert(const ::onnx::ModelProto& mp, const std::string& base_dir, Loc loc) {
  auto m = std::make_shared<ModelImpl>();
  check(mp.has_graph(), kOp, loc, "the model has no graph");
  const auto& g = mp.graph();
  m->info.ir_version = mp.ir_version();
  m->info.producer = mp.producer_name() + (mp.producer_version().empty() ? "" : " " + mp.producer_version());
  for (const auto& o : mp.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") m->info.opset = o.version();
  // IR version 2 files import no opset; files with only other domains' ops import none for ours.
  if (m->info.opset == 0) m->info.opset = 1;
  check(m->info.opset >= 1 && m->info.opset <= 1000, kOp, loc, "implausible opset ", m->info.opset);

  std::set<std::string> defined;
  for (const auto& init : g.initializer()) {
    check(!init.name().empty(), kOp, loc, "an initializer has no name");
    check(!m->initializers.count(init.name()), kOp, loc, "initializer '", init.name(), "' is defined twice");
    Tensor t = tensor_from_proto(init, base_dir, loc);
    m->info.initializer_bytes += t.numel() * static_cast<int64_t>(dtype_size(t.dtype()));
    m->initializers.emplace(init.name(), t);
    defined.insert(init.name());
  }
  check(g.sparse_initializer().empty(), kUnsupported, loc, "sparse initializers are not supported");
  m->info.initializers = static_cast<int64_t>(m->initializers.size());
  for (const auto& in : g.input()) {
    check(!in.name().empty(), kOp, loc, "a graph input has no name");
    if (m->initializers.count(in.name())) continue;  // an initializer with a default: not a required input
    check(!defined.count(in.name()), kOp, loc, "graph input '", in.name(), "' is declared twice");
    m->info.inputs.push_back(value_info(in));
    if (m->info.inputs.back().kind == ValueInfo::Kind::Other)
      m->info.unsupported.push_back("input '" + in.name() + "' of a type alk lacks (a map or sparse tensor)");
    m->input_names.push_back(in.name());
    defined.insert(in.name());
  }
  GraphReader reader{base_dir, loc, m->info};
  std::set<std::string> no_outer_scope, free;
  m->nodes = reader.nodes(g.node(), defined, no_outer_scope, 0, &free);
  for (const auto& [op, count] : m->info.op_histogram) {
    (void)count;
    if (!is_supported_op(op)) m->info.unsupported.push_back(op);
  }
  for (const auto& out : g.output()) {
    check(defined.count(out.name()), kOp, loc, "graph output '", out.name(), "' is never computed");
    m->info.outputs.push_back(value_info(out));
    if (m->info.outputs.back().kind == ValueInfo::Kind::Other)
      m->info.unsupported.push_back("output '" + out.name() + "' of a type alk lacks (a map or sparse tensor)");
    m->output_names.push_back(out.name());
  }
  fold_batch_norms(*m);
  return m;
}

}  // namespace

Model load_bytes(std::string_view bytes, const std::string& base_dir, Loc loc) {
  check(bytes.size() < static_cast<size_t>(INT_MAX), kOp, loc, "file of ", bytes.size(), " bytes is over 2 GB");
  ::onnx::ModelProto mp;
  check(mp.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())), kOp, loc,
        "not a valid ONNX model (protobuf parse failed: truncated or malformed)");
  return Model(convert(mp, base_dir, loc));
}

Model load(const std::string& path, Loc loc) {
  const std::string bytes = read_file(path, kOp, loc);
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  try {
    return load_bytes(bytes, dir, loc);
  } catch (const Error& e) {
    throw Error(e.op(), path + ": " + e.detail(), loc);
  }
}

namespace {

template <class Proto>
Proto parse_pb(const std::string& path, const char* what, Loc loc) {
  const std::string bytes = read_file(path, kOp, loc);
  check(bytes.size() < static_cast<size_t>(INT_MAX), kOp, loc, path, ": over 2 GB");
  Proto p;
  check(p.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())), kOp, loc, path, ": not a ", what);
  return p;
}

std::string dir_of(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

Value sequence_from_proto(const ::onnx::SequenceProto& p, const std::string& base_dir, Loc loc) {
  check(p.elem_type() == ::onnx::SequenceProto::TENSOR || (p.elem_type() == ::onnx::SequenceProto::UNDEFINED &&
                                                           p.tensor_values_size() == 0),
        kUnsupported, loc, "sequence '", p.name(), "' holds elements of kind ", p.elem_type(), " (alk runs sequences of tensors)");
  std::vector<Tensor> items;
  for (const auto& t : p.tensor_values()) items.push_back(tensor_from_proto(t, base_dir, loc));
  return Value::sequence(std::move(items));
}

}  // namespace

Tensor load_tensor_pb(const std::string& path, Loc loc) {
  return tensor_from_proto(parse_pb<::onnx::TensorProto>(path, "TensorProto", loc), dir_of(path), loc);
}

Value load_value_pb(const std::string& path, ValueInfo::Kind kind, Loc loc) {
  switch (kind) {
    case ValueInfo::Kind::Tensor: return Value::of(load_tensor_pb(path, loc));
    case ValueInfo::Kind::Sequence:
      return sequence_from_proto(parse_pb<::onnx::SequenceProto>(path, "SequenceProto", loc), dir_of(path), loc);
    case ValueInfo::Kind::Optional: {
      const auto p = parse_pb<::onnx::OptionalProto>(path, "OptionalProto", loc);
      using O = ::onnx::OptionalProto;
      switch (p.elem_type()) {
        case O::UNDEFINED: return Value::none();
        case O::TENSOR:
          check(p.has_tensor_value(), kOp, loc, path, ": an optional tensor without its tensor");
          return Value::of(tensor_from_proto(p.tensor_value(), dir_of(path), loc));
        case O::SEQUENCE:
          check(p.has_sequence_value(), kOp, loc, path, ": an optional sequence without its sequence");
          return sequence_from_proto(p.sequence_value(), dir_of(path), loc);
        default: fail(kUnsupported, loc, path, ": an optional of kind ", p.elem_type(), " (alk runs tensors and sequences)");
      }
    }
    case ValueInfo::Kind::Other: break;
  }
  fail(kUnsupported, loc, path, ": a value of a type alk lacks (a map or sparse tensor)");
}

}  // namespace alk::onnx
