#include "placement/placer.h"

#include <algorithm>
#include <charconv>

#include "placement/cpu_list.h"

namespace pier::placement {
namespace {

bool IsIndex(const std::string& gpu, int* index) {
  const auto [end, ec] = std::from_chars(gpu.data(), gpu.data() + gpu.size(), *index);
  return ec == std::errc() && end == gpu.data() + gpu.size() && *index >= 0;
}

const Gpu* FindGpu(const Topology& topology, const std::string& gpu) {
  int index = -1;
  for (const Gpu& g : topology.gpus) {
    if (IsIndex(gpu, &index) ? g.index == index : (!g.uuid.empty() && g.uuid == gpu)) return &g;
  }
  return nullptr;
}

std::string NodeText(int node) { return "NUMA node " + std::to_string(node); }

}  // namespace

Placement::~Placement() { placer_->Release(*this); }

Placer::Placer(Topology topology)
    : topology_(std::move(topology)), core_use_(topology_.cores.size(), 0) {}

std::vector<int> Placer::CoreUse() const {
  MutexLock lock(mutex_);
  return core_use_;
}

Status Placer::Check(const BindingRequest& request, const std::string& who) const {
  MutexLock lock(mutex_);
  return CheckLocked(request, who);
}

Status Placer::CheckLocked(const BindingRequest& request, const std::string& who) const {
  if (request.cpus == BindingRequest::Choice::kGiven) {
    const std::vector<int> allowed = topology_.AllowedCpus();
    std::vector<int> outside;
    for (int cpu : request.cpu_list) {
      if (!std::binary_search(allowed.begin(), allowed.end(), cpu)) outside.push_back(cpu);
    }
    if (request.cpu_list.empty()) return InvalidArgumentError(who + ": cpus: the list is empty");
    if (!outside.empty()) {
      return InvalidArgumentError(
          who + ": cpus: " + FormatCpuList(outside) + (outside.size() == 1 ? " is" : " are") +
          " outside the CPUs this server may use (" + FormatCpuList(allowed) + ", from " +
          topology_.source + ": its cgroup's cpuset and the server's own affinity)");
    }
  }
  if (request.numa == BindingRequest::Choice::kGiven &&
      std::find(topology_.numa_nodes.begin(), topology_.numa_nodes.end(), request.numa_node) ==
          topology_.numa_nodes.end()) {
    return InvalidArgumentError(who + ": numa_node: " + std::to_string(request.numa_node) +
                                " is not a NUMA node this server may use (" +
                                FormatCpuList(topology_.numa_nodes) + ")");
  }
  int index = -1;
  if (!request.gpu.empty() && IsIndex(request.gpu, &index) && !topology_.gpus.empty() &&
      index >= static_cast<int>(topology_.gpus.size())) {
    return InvalidArgumentError(who + ": gpu: " + request.gpu + " is not a GPU of " +
                                topology_.source + " (it has " +
                                std::to_string(topology_.gpus.size()) + ": 0-" +
                                std::to_string(topology_.gpus.size() - 1) + ")");
  }
  if (!request.gpu.empty() && !IsIndex(request.gpu, &index) && !request.gpu.starts_with("GPU-") &&
      !request.gpu.starts_with("MIG-")) {
    return InvalidArgumentError(who + ": gpu: \"" + request.gpu +
                                "\" is neither a GPU index nor a GPU-/MIG- UUID");
  }
  return Status::Ok();
}

int Placer::SpreadNode() const {
  int best = -1, best_count = 0;
  for (int node : topology_.numa_nodes) {
    auto it = node_instances_.find(node);
    const int count = it == node_instances_.end() ? 0 : it->second;
    if (best < 0 || count < best_count) {
      best = node;
      best_count = count;
    }
  }
  return best;
}

Result<std::unique_ptr<Placement>> Placer::Place(const BindingRequest& request, int threads,
                                                 const std::string& who) {
  MutexLock lock(mutex_);
  PIER_RETURN_IF_ERROR(CheckLocked(request, who));
  Binding binding;
  using Choice = BindingRequest::Choice;
  const bool several_nodes = topology_.numa_nodes.size() > 1;

  const Gpu* gpu = request.gpu.empty() ? nullptr : FindGpu(topology_, request.gpu);
  if (!request.gpu.empty()) {
    binding.gpu = request.gpu;
    binding.gpu_numa_node = gpu != nullptr ? gpu->numa_node : -1;
    binding.environment.push_back("CUDA_DEVICE_ORDER=PCI_BUS_ID");
    binding.environment.push_back("CUDA_VISIBLE_DEVICES=" + request.gpu);
    if (gpu == nullptr && topology_.gpus.empty()) {
      binding.warnings.push_back("no NVIDIA GPU is visible to hwloc on " + topology_.source +
                                 ": gpu " + request.gpu + " is passed on, its NUMA node unknown");
    } else if (gpu == nullptr) {
      binding.warnings.push_back("gpu " + request.gpu + " is not in " + topology_.source +
                                 "'s PCI list: its NUMA node is unknown");
    }
  }
  if (request.mps_thread_percentage > 0) {
    binding.environment.push_back("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=" +
                                  std::to_string(request.mps_thread_percentage));
  }
  if (request.mps_memory_limit_bytes > 0) {
    // The worker sees its one GPU as device 0; the limit is in MiB (at least 1).
    const uint64_t mib = std::max<uint64_t>(1, request.mps_memory_limit_bytes >> 20);
    binding.environment.push_back("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=" + std::to_string(mib) +
                                  "M");
  }

  // The node: given; auto from the GPU, else spread; with cpus auto, also a node to take the
  // cores from (spread), without binding memory.
  int node = -1;
  bool bind_memory = false;
  if (request.numa == Choice::kGiven) {
    node = request.numa_node;
    bind_memory = true;
  } else if (several_nodes && (request.numa == Choice::kAuto || request.cpus == Choice::kAuto)) {
    node = binding.gpu_numa_node >= 0 ? binding.gpu_numa_node : SpreadNode();
    bind_memory = request.numa == Choice::kAuto;
  }
  if (bind_memory) binding.numa_node = node;

  std::vector<int> cores;
  if (request.cpus == Choice::kGiven) {
    binding.cpus = request.cpu_list;
    for (const Core& c : topology_.cores) {
      const bool used = std::any_of(c.pus.begin(), c.pus.end(), [&](int pu) {
        return std::binary_search(request.cpu_list.begin(), request.cpu_list.end(), pu);
      });
      if (used) cores.push_back(c.index);
    }
  } else if (request.cpus == Choice::kAuto) {
    std::vector<const Core*> candidates = topology_.CoresOf(node);
    if (candidates.empty()) candidates = topology_.CoresOf(-1);
    std::stable_sort(candidates.begin(), candidates.end(),
                     [&](const Core* a, const Core* b) PIER_REQUIRES(mutex_) {
                       return core_use_[static_cast<size_t>(a->index)] <
                              core_use_[static_cast<size_t>(b->index)];
                     });
    const size_t want = static_cast<size_t>(std::max(1, threads));
    if (want > candidates.size()) {
      binding.warnings.push_back(std::to_string(want) + " threads but only " +
                                 std::to_string(candidates.size()) + " cores" +
                                 (node >= 0 ? " on " + NodeText(node) : std::string()) +
                                 ": the threads share them");
    }
    candidates.resize(std::min(want, candidates.size()));
    std::vector<int> shared;
    for (const Core* c : candidates) {
      cores.push_back(c->index);
      binding.cpus.insert(binding.cpus.end(), c->pus.begin(), c->pus.end());
      if (core_use_[static_cast<size_t>(c->index)] > 0) {
        shared.insert(shared.end(), c->pus.begin(), c->pus.end());
      }
    }
    std::sort(binding.cpus.begin(), binding.cpus.end());
    std::sort(cores.begin(), cores.end());
    if (!shared.empty()) {
      binding.warnings.push_back("instances outnumber free cores: cpus " + FormatCpuList(shared) +
                                 " are shared with other instances");
    }
  }
  for (int c : cores) ++core_use_[static_cast<size_t>(c)];
  if (node >= 0) ++node_instances_[node];
  return std::unique_ptr<Placement>(new Placement(this, std::move(binding), cores, node));
}

void Placer::Release(const Placement& placement) {
  MutexLock lock(mutex_);
  for (int c : placement.cores_) --core_use_[static_cast<size_t>(c)];
  if (placement.node_ >= 0) --node_instances_[placement.node_];
}

}  // namespace pier::placement
