// ZeRO-1: parameters assigned to owner ranks, optimizer state only on the owner, parameters
// broadcast from their owners after each update, and the whole state gathered for
// checkpoints (so a checkpoint loads on any world size, with or without ZeRO).
#include <algorithm>
#include <map>
#include <numeric>

#include "alk/dist.h"
#include "graph/graph.h"

namespace alk::dist {

namespace detail {
void broadcast_in_place(const std::vector<Tensor>& ts, const std::vector<int>& roots);  // process_group.cpp
}

Zero1::Zero1(const nn::NamedTensors& params, Loc loc) : params_(params), rank_(rank()) {
  const int world = world_size();
  check(static_cast<int>(params_.size()) >= world, "dist", loc, "ZeRO-1 over ", world, " ranks needs at least as many "
        "parameters, got ", params_.size());
  std::vector<size_t> order(params_.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return params_[a].second.numel() > params_[b].second.numel(); });
  std::vector<int64_t> load(static_cast<size_t>(world), 0);
  owner_.assign(params_.size(), 0);
  for (size_t i : order) {
    const auto least = std::min_element(load.begin(), load.end()) - load.begin();
    owner_[i] = static_cast<int>(least);
    load[static_cast<size_t>(least)] += params_[i].second.numel();
  }
}

nn::NamedTensors Zero1::owned() const {
  nn::NamedTensors out;
  for (size_t i = 0; i < params_.size(); ++i)
    if (owner_[i] == rank_) out.push_back(params_[i]);
  return out;
}

void Zero1::sync_params() {
  std::vector<Tensor> ts;
  for (auto& [name, p] : params_) ts.push_back(p);
  detail::broadcast_in_place(ts, owner_);
}

nn::NamedTensors Zero1::gather_state(const optim::Optimizer& opt) {
  const nn::NamedTensors mine_list = opt.state_dict();
  std::map<std::string, Tensor> mine(mine_list.begin(), mine_list.end());
  // The slots every parameter has (the optimizer's kind decides them: AdamW's step,
  // exp_avg, exp_avg_sq), read from one owned parameter; every rank owns one.
  std::vector<std::string> slots;
  for (size_t i = 0; i < params_.size() && slots.empty(); ++i) {
    if (owner_[i] != rank_) continue;
    const std::string prefix = params_[i].first + ".";
    for (auto& [key, t] : mine_list)
      if (key.rfind(prefix, 0) == 0 && key.find('.', prefix.size()) == std::string::npos)
        slots.push_back(key.substr(prefix.size()));
  }
  std::sort(slots.begin(), slots.end());
  nn::NamedTensors out;
  Tensor steps = tensor(std::vector<int64_t>{opt.steps()}, {1});
  all_reduce(steps, ReduceOp::Max);
  out.emplace_back("step", steps.reshape({}));
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& [name, p] = params_[i];
    for (const std::string& slot : slots) {
      const std::string key = name + "." + slot;
      Tensor t;
      if (owner_[i] == rank_) {
        auto it = mine.find(key);
        check(it != mine.end(), "dist", Loc::current(), "ZeRO-1: this rank's optimizer has no state '", key, "'");
        t = it->second.contiguous();
        t = tensor_from_host(host_bytes(t).data(), t.shape(), t.dtype(), t.device());  // a copy of our own
      } else {
        // Where the owner keeps it (with its parameter), so both sides use one engine.
        t = (slot == "step" ? scalar_tensor(0, DType::F64) : zeros(p.shape(), p.dtype())).to(p.device());
      }
      broadcast(t, owner_[i]);
      out.emplace_back(key, t);
    }
  }
  return out;
}

nn::NamedTensors Zero1::own_state(const nn::NamedTensors& full) const {
  std::map<std::string, bool> owned_names;
  for (size_t i = 0; i < params_.size(); ++i) owned_names[params_[i].first] = owner_[i] == rank_;
  nn::NamedTensors out;
  for (auto& [key, t] : full) {
    if (key == "step") {
      out.emplace_back(key, t);
      continue;
    }
    const size_t dot = key.rfind('.');
    auto it = owned_names.find(key.substr(0, dot == std::string::npos ? 0 : dot));
    if (it != owned_names.end() && it->second) out.emplace_back(key, t);
  }
  return out;
}

}  // namespace alk::dist
