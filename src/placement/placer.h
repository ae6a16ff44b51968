// Placer: chooses each model instance's binding on the machine's Topology, remembering what
// every live instance holds so `auto` spreads them. One per server (in the DeviceSet), asked
// by the model loader for each worker instance and told when an instance goes away (the
// Placement handle releases it).
//
// The choices:
// - numa_node: a given node must be allowed. `auto`: the node of the instance's GPU from its
//   PCI locality; without a GPU (or one whose node is unknown) the node with the fewest
//   instances (spread; ties: the lowest). On a single-node machine nothing is bound.
// - cpus: a given list must lie inside the allowed CPUs (the cgroup's cpuset and Pier's own
//   affinity), else INVALID_ARGUMENT naming the CPUs outside. `auto`: `threads` whole cores
//   (all their hardware threads), on the chosen node when there is one, least used first
//   (ties: the lowest core), so instances get disjoint cores while there are enough and
//   share them round-robin, with a warning, when they outnumber cores.
// - gpu: an index must name a GPU of the topology when the topology shows GPUs (a machine
//   whose PCI bus hwloc cannot read shows none: then the index is passed on with a warning);
//   a UUID is passed on as it is. The worker gets CUDA_VISIBLE_DEVICES and
//   CUDA_DEVICE_ORDER=PCI_BUS_ID.
//
// Thread-safety: all methods may be called from any thread.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "placement/binding.h"
#include "placement/topology.h"

namespace pier::placement {

class Placer;

// What one instance holds; releases it when destroyed. Must not outlive its Placer.
class Placement {
 public:
  ~Placement();
  Placement(const Placement&) = delete;
  Placement& operator=(const Placement&) = delete;
  const Binding& binding() const { return binding_; }

 private:
  friend class Placer;
  Placement(Placer* placer, Binding binding, std::vector<int> cores, int node)
      : placer_(placer), binding_(std::move(binding)), cores_(std::move(cores)), node_(node) {}
  Placer* placer_;
  Binding binding_;
  std::vector<int> cores_;  // core indices counted as used
  int node_;                // the NUMA node counted for spreading; -1: none
};

class Placer {
 public:
  explicit Placer(Topology topology);

  // The request checked against the topology without taking anything (config validation:
  // a CPU outside the allowed set, a node or GPU index that does not exist).
  // `who`: "models[0] (chat)" for messages.
  [[nodiscard]] Status Check(const BindingRequest& request, const std::string& who) const;
  // Chooses and holds a binding for one instance running `threads` compute threads.
  [[nodiscard]] Result<std::unique_ptr<Placement>> Place(const BindingRequest& request, int threads,
                                                         const std::string& who);

  const Topology& topology() const { return topology_; }
  // How many live placements use each core (by core index), for tests.
  std::vector<int> CoreUse() const;

 private:
  friend class Placement;
  void Release(const Placement& placement);
  Status CheckLocked(const BindingRequest& request, const std::string& who) const
      PIER_REQUIRES(mutex_);
  int SpreadNode() const PIER_REQUIRES(mutex_);  // the node with the fewest instances

  const Topology topology_;
  mutable Mutex mutex_;
  std::vector<int> core_use_ PIER_GUARDED_BY(mutex_);  // by core index
  std::map<int, int> node_instances_
      PIER_GUARDED_BY(mutex_);  // NUMA node -> instances placed there
};

}  // namespace pier::placement
