// alk.remote (python/alk/__init__.py): the operations registry of a server over gRPC, and a
// server of this process's devices (src/remote). Present when alk was built with gRPC
// (ALK_HAVE_REMOTE); otherwise the names are absent and alk.remote raises.
#include "common.h"

#ifdef ALK_HAVE_REMOTE
#include "remote/client.h"
#include "remote/server.h"
#endif

namespace alkpy {

void bind_remote(py::module_& m) {
#ifdef ALK_HAVE_REMOTE
  using alk::remote::OpsClient;
  py::class_<OpsClient>(m, "_RemoteOps", "A server's operations registry (alk serve --ops); use alk.remote(target).")
      .def(py::init([](const std::string& target) {
             return std::make_unique<OpsClient>(target, alk::remote::ClientOptions::from_environment());
           }),
           py::arg("target"), "Connects to HOST:PORT with the token in ALK_REMOTE_TOKEN_FILE.")
      .def(
          "ops_json", [](const OpsClient& c) { return c.list_ops(); }, py::call_guard<py::gil_scoped_release>(),
          "Every op's spec, as JSON text.")
      .def(
          "describe", [](const OpsClient& c, const std::string& op) { return c.describe(op); }, py::arg("op"),
          py::call_guard<py::gil_scoped_release>(), "One op's call as JSON Schema text.")
      .def(
          "call",
          [](const OpsClient& c, const std::string& op, const std::vector<alk::Tensor>& inputs,
             const std::string& attributes_json, const std::string& device) {
            return c.call(op, inputs, attributes_json, device);
          },
          py::arg("op"), py::arg("inputs"), py::arg("attributes_json"), py::arg("device"), py::call_guard<Released>(),
          "Runs op on the peer's device; the result comes back as a CPU tensor.");
  py::class_<alk::remote::Server>(m, "_RemoteServer", "This process's devices served over gRPC; use alk.serve_ops(...).")
      .def(py::init([](const std::vector<std::string>& tokens, const std::string& host, int port) {
             alk::remote::ServerOptions o;
             o.host = host;
             o.port = port;
             for (const std::string& t : tokens) o.tokens.push_back({t});
             return std::make_unique<alk::remote::Server>(o);
           }),
           py::arg("tokens"), py::arg("host"), py::arg("port"))
      .def_property_readonly("port", &alk::remote::Server::port, "The port listened on.")
      .def(
          "shutdown", [](alk::remote::Server& s) { s.shutdown(); }, py::call_guard<py::gil_scoped_release>(),
          "Stops serving and frees every session.");
#else
  (void)m;
#endif
}

}  // namespace alkpy
