#include "placement/bind_process.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "placement/topology.h"

namespace pier::placement {
namespace {

// Runs `body` in a forked child (binding is per process) and returns its exit status.
template <typename Body>
int InChild(Body body) {
  const pid_t pid = fork();
  if (pid == 0) _exit(body());
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100;
}

TEST(BindProcessTest, BindsToTheFirstAllowedCpu) {
  Result<Topology> t = LoadSystemTopology();
  ASSERT_TRUE(t.ok());
  const int cpu = t->AllowedCpus().front();
  EXPECT_EQ(InChild([&] {
              if (!BindThisProcess({cpu}, -1).ok()) return 1;
              cpu_set_t set;
              CPU_ZERO(&set);
              if (sched_getaffinity(0, sizeof(set), &set) != 0) return 2;
              return CPU_COUNT(&set) == 1 && CPU_ISSET(cpu, &set) ? 0 : 3;
            }),
            0);
}

// Memory binding needs the kernel's NUMA support (some virtual machines lack it: mbind is
// ENOSYS there); either the process's memory policy is node 0 afterwards or the error says why.
TEST(BindProcessTest, BindsMemoryToANodeOrSaysWhyNot) {
  Result<Topology> t = LoadSystemTopology();
  ASSERT_TRUE(t.ok());
  const int node = t->numa_nodes.front();
  EXPECT_EQ(InChild([&] {
              Status bound = BindThisProcess({}, node);
              if (!bound.ok()) {
                const std::string prefix =
                    "cannot bind memory to NUMA node " + std::to_string(node) + ": ";
                return bound.message().starts_with(prefix) && bound.message().size() > prefix.size()
                           ? 0
                           : 4;
              }
              unsigned long mask = 0;
              int mode = 0;
              if (syscall(SYS_get_mempolicy, &mode, &mask, sizeof(mask) * 8, nullptr, 0) != 0) {
                return 5;
              }
              return mask == (1ul << node) ? 0 : 6;
            }),
            0);
}

TEST(BindProcessTest, CpusOrNodesThatDoNotExistAreRefusedWithAReason) {
  Status cpus = BindThisProcess({4000}, -1);
  ASSERT_FALSE(cpus.ok());
  EXPECT_NE(cpus.message().find("cannot bind to cpus 4000: 4000 not on this machine"),
            std::string::npos)
      << cpus.message();
  Status node = BindThisProcess({}, 63);
  ASSERT_FALSE(node.ok());
  EXPECT_NE(node.message().find("cannot bind memory to NUMA node 63"), std::string::npos)
      << node.message();
  EXPECT_TRUE(BindThisProcess({}, -1).ok());  // nothing to do
}

}  // namespace
}  // namespace pier::placement
