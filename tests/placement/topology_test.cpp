#include "placement/topology.h"

#include <gtest/gtest.h>

#include "fixtures.h"
#include "placement/cpu_list.h"

namespace pier::placement {
namespace {

TEST(TopologyTest, ReadsTwoSocketsWithHyperthreads) {
  const Topology t = LoadFixture("two_sockets.xml");
  EXPECT_EQ(t.numa_nodes, (std::vector<int>{0, 1}));
  ASSERT_EQ(t.cores.size(), 16u);
  // Core 0: PUs 0 and 16 (first threads first, as Linux numbers them), node 0; core 8 node 1.
  EXPECT_EQ(t.cores[0].pus, (std::vector<int>{0, 16}));
  EXPECT_EQ(t.cores[0].numa_node, 0);
  EXPECT_EQ(t.cores[8].pus, (std::vector<int>{8, 24}));
  EXPECT_EQ(t.cores[8].numa_node, 1);
  EXPECT_EQ(FormatCpuList(t.AllowedCpus()), "0-31");
  EXPECT_TRUE(t.gpus.empty());
  EXPECT_EQ(t.Summary(), "2 NUMA nodes, 16 cores (32 CPUs 0-31), 0 NVIDIA GPUs");
}

TEST(TopologyTest, ReadsEightGpusOnTwoNodesFromPciLocality) {
  const Topology t = LoadFixture("eight_gpus.xml");
  ASSERT_EQ(t.gpus.size(), 8u);
  for (const Gpu& g : t.gpus) {
    EXPECT_EQ(g.numa_node, g.index < 4 ? 0 : 1) << g.pci_bus_id;
    EXPECT_EQ(g.name, "GH100 [H100 SXM5 80GB]");
  }
  // PCI bus order.
  EXPECT_EQ(t.gpus[0].pci_bus_id, "0000:18:00.0");
  EXPECT_EQ(t.gpus[7].pci_bus_id, "0000:f8:00.0");
  EXPECT_EQ(t.cores.size(), 32u);
}

TEST(TopologyTest, ACgroupCpusetLimitsTheCores) {
  const Topology t = LoadFixture("two_sockets_cgroup.xml");
  EXPECT_EQ(FormatCpuList(t.AllowedCpus()), "4-11,20-27");
  ASSERT_EQ(t.cores.size(), 8u);
  EXPECT_EQ(t.CoresOf(0).size(), 4u);
  EXPECT_EQ(t.CoresOf(1).size(), 4u);
}

TEST(TopologyTest, ThisMachineHasTheCpusThisProcessMayUse) {
  Result<Topology> t = LoadSystemTopology();
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  cpu_set_t mine;
  CPU_ZERO(&mine);
  ASSERT_EQ(sched_getaffinity(0, sizeof(mine), &mine), 0);
  std::vector<int> expected;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &mine)) expected.push_back(c);
  }
  EXPECT_EQ(t->AllowedCpus(), expected);
  EXPECT_FALSE(t->numa_nodes.empty());
}

TEST(TopologyTest, BadFilesAreRefusedWithTheirPath) {
  Result<Topology> missing = LoadTopologyXml("/nonexistent/topology.xml");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/topology.xml"), std::string::npos);
  const std::string not_xml = FixturePath("../fixtures.h");
  Result<Topology> garbage = LoadTopologyXml(not_xml);
  ASSERT_FALSE(garbage.ok());
  EXPECT_NE(garbage.status().message().find(not_xml), std::string::npos)
      << garbage.status().message();
}

}  // namespace
}  // namespace pier::placement
