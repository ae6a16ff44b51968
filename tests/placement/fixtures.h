// The XML topologies of tests/placement/fixtures/ (tools/gen_topology_fixtures.py).
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "placement/topology.h"

namespace pier::placement {

inline std::string FixturePath(const std::string& name) {
  return std::string(PIER_SOURCE_DIR) + "/tests/placement/fixtures/" + name;
}

inline Topology LoadFixture(const std::string& name) {
  Result<Topology> topology = LoadTopologyXml(FixturePath(name));
  EXPECT_TRUE(topology.ok()) << topology.status().ToString();
  return topology.ok() ? std::move(topology).value() : Topology{};
}

}  // namespace pier::placement
