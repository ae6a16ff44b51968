#include "placement/placer.h"

#include <gtest/gtest.h>

#include <memory>

#include "fixtures.h"
#include "placement/cpu_list.h"

namespace pier::placement {
namespace {

using Choice = BindingRequest::Choice;

BindingRequest Auto() {
  BindingRequest r;
  r.cpus = Choice::kAuto;
  r.numa = Choice::kAuto;
  return r;
}

std::unique_ptr<Placement> PlaceOk(Placer& placer, const BindingRequest& r, int threads) {
  Result<std::unique_ptr<Placement>> p = placer.Place(r, threads, "models[0] (chat)");
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? std::move(p).value() : nullptr;
}

TEST(PlacerTest, AutoSpreadsInstancesOverSocketsOnDisjointCores) {
  Placer placer(LoadFixture("two_sockets.xml"));
  std::vector<std::unique_ptr<Placement>> held;
  // Four 4-thread instances: node 0, node 1, node 0, node 1, each on 4 whole cores.
  const std::vector<std::string> expected = {"0-3,16-19", "8-11,24-27", "4-7,20-23", "12-15,28-31"};
  for (size_t i = 0; i < expected.size(); ++i) {
    held.push_back(PlaceOk(placer, Auto(), 4));
    const Binding& b = held.back()->binding();
    EXPECT_EQ(FormatCpuList(b.cpus), expected[i]) << i;
    EXPECT_EQ(b.numa_node, static_cast<int>(i % 2)) << i;
    EXPECT_TRUE(b.warnings.empty()) << b.warnings.front();
    EXPECT_TRUE(b.environment.empty());
  }
  EXPECT_EQ(placer.CoreUse(), std::vector<int>(16, 1));
  // A fifth has to share: it gets the least used cores of the emptier node, with a warning.
  std::unique_ptr<Placement> fifth = PlaceOk(placer, Auto(), 2);
  EXPECT_EQ(FormatCpuList(fifth->binding().cpus), "0-1,16-17");
  ASSERT_EQ(fifth->binding().warnings.size(), 1u);
  EXPECT_NE(fifth->binding().warnings[0].find("shared with other instances"), std::string::npos);
  // Releasing an instance frees its cores for the next.
  fifth.reset();
  held[1].reset();
  std::unique_ptr<Placement> again = PlaceOk(placer, Auto(), 4);
  EXPECT_EQ(FormatCpuList(again->binding().cpus), "8-11,24-27");
  EXPECT_TRUE(again->binding().warnings.empty());
}

TEST(PlacerTest, AutoFollowsEachGpusNumaNode) {
  Placer placer(LoadFixture("eight_gpus.xml"));
  std::vector<std::unique_ptr<Placement>> held;
  // The field report's server: one instance per GPU, 4 threads each, GPUs in an odd order.
  for (int gpu : {5, 0, 7, 2, 1, 6, 3, 4}) {
    BindingRequest r = Auto();
    r.gpu = std::to_string(gpu);
    held.push_back(PlaceOk(placer, r, 4));
    const Binding& b = held.back()->binding();
    const int node = gpu < 4 ? 0 : 1;
    EXPECT_EQ(b.gpu_numa_node, node) << gpu;
    EXPECT_EQ(b.numa_node, node) << gpu;
    ASSERT_EQ(b.cpus.size(), 4u);
    for (int cpu : b.cpus) EXPECT_EQ(cpu / 16, node) << "gpu " << gpu << " cpu " << cpu;
    EXPECT_EQ(b.environment, (std::vector<std::string>{"CUDA_DEVICE_ORDER=PCI_BUS_ID",
                                                       "CUDA_VISIBLE_DEVICES=" + r.gpu}));
    EXPECT_TRUE(b.warnings.empty());
  }
  // 8 instances x 4 threads = the 32 cores, each used once.
  EXPECT_EQ(placer.CoreUse(), std::vector<int>(32, 1));
  EXPECT_EQ(held[0]->binding().Describe(),
            "cpus 16-19, memory on NUMA node 1, gpu 5 (on NUMA node 1)");
}

TEST(PlacerTest, AutoStaysInsideTheCgroupsCpuset) {
  Placer placer(LoadFixture("two_sockets_cgroup.xml"));
  std::unique_ptr<Placement> a = PlaceOk(placer, Auto(), 2);
  std::unique_ptr<Placement> b = PlaceOk(placer, Auto(), 2);
  std::unique_ptr<Placement> c = PlaceOk(placer, Auto(), 2);
  EXPECT_EQ(FormatCpuList(a->binding().cpus), "4-5,20-21");
  EXPECT_EQ(FormatCpuList(b->binding().cpus), "8-9,24-25");
  EXPECT_EQ(FormatCpuList(c->binding().cpus), "6-7,22-23");
  // More threads than the node has cores: all of the node's, with a warning.
  std::unique_ptr<Placement> d = PlaceOk(placer, Auto(), 6);
  EXPECT_EQ(FormatCpuList(d->binding().cpus), "8-11,24-27");
  EXPECT_FALSE(d->binding().warnings.empty());
}

TEST(PlacerTest, GivenCpusOutsideTheAllowedSetAreAConfigError) {
  Placer placer(LoadFixture("two_sockets_cgroup.xml"));
  BindingRequest r;
  r.cpus = Choice::kGiven;
  r.cpu_list = {2, 3, 4, 5};
  Status bad = placer.Check(r, "serve.yaml: models[0] (chat)");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("serve.yaml: models[0] (chat): cpus: 2-3 are outside the CPUs "
                               "this server may use (4-11,20-27"),
            std::string::npos)
      << bad.message();
  EXPECT_FALSE(placer.Place(r, 1, "chat").ok());
  EXPECT_EQ(placer.CoreUse(), std::vector<int>(8, 0));  // nothing taken
  r.cpu_list = {4, 20};
  std::unique_ptr<Placement> ok = PlaceOk(placer, r, 1);
  EXPECT_EQ(FormatCpuList(ok->binding().cpus), "4,20");
  EXPECT_EQ(ok->binding().numa_node, -1);  // given cpus alone do not bind memory
  EXPECT_EQ(placer.CoreUse()[0], 1);       // but count for auto's choices
}

TEST(PlacerTest, NodesAndGpusThatDoNotExistAreConfigErrors) {
  Placer placer(LoadFixture("eight_gpus.xml"));
  BindingRequest node;
  node.numa = Choice::kGiven;
  node.numa_node = 2;
  Status bad_node = placer.Check(node, "chat");
  ASSERT_FALSE(bad_node.ok());
  EXPECT_NE(bad_node.message().find("numa_node: 2 is not a NUMA node this server may use (0-1)"),
            std::string::npos)
      << bad_node.message();
  BindingRequest gpu;
  gpu.gpu = "8";
  Status bad_gpu = placer.Check(gpu, "chat");
  ASSERT_FALSE(bad_gpu.ok());
  EXPECT_NE(bad_gpu.message().find("gpu: 8 is not a GPU of"), std::string::npos)
      << bad_gpu.message();
  gpu.gpu = "cuda:1";
  EXPECT_NE(placer.Check(gpu, "chat").message().find("neither a GPU index nor"), std::string::npos);
  // A MIG UUID is passed on as it is; its node is unknown, so auto spreads.
  gpu.gpu = "MIG-4b6b1a2c-0000-5000-8000-000000000000";
  gpu.numa = Choice::kAuto;
  gpu.mps_thread_percentage = 25;
  gpu.mps_memory_limit_bytes = uint64_t{40} << 30;
  std::unique_ptr<Placement> p = PlaceOk(placer, gpu, 1);
  EXPECT_EQ(p->binding().numa_node, 0);
  EXPECT_EQ(
      p->binding().environment,
      (std::vector<std::string>{"CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES=" + gpu.gpu,
                                "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25",
                                "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=40960M"}));
  EXPECT_EQ(p->binding().warnings.size(), 1u);  // its NUMA node is unknown
}

TEST(PlacerTest, OnOneNodeAutoBindsCoresButNotMemory) {
  Topology one;
  one.source = "test";
  one.numa_nodes = {0};
  one.cores = {{0, {0}, 0}, {1, {1}, 0}};
  Placer placer(one);
  std::unique_ptr<Placement> a = PlaceOk(placer, Auto(), 1);
  std::unique_ptr<Placement> b = PlaceOk(placer, Auto(), 1);
  EXPECT_EQ(a->binding().cpus, std::vector<int>{0});
  EXPECT_EQ(b->binding().cpus, std::vector<int>{1});
  EXPECT_EQ(a->binding().numa_node, -1);
  // No binding asked: nothing bound, nothing counted.
  std::unique_ptr<Placement> none = PlaceOk(placer, BindingRequest{}, 2);
  EXPECT_FALSE(none->binding().bound());
  EXPECT_EQ(none->binding().Describe(), "not bound");
  EXPECT_EQ(placer.CoreUse(), (std::vector<int>{1, 1}));
}

}  // namespace
}  // namespace pier::placement
