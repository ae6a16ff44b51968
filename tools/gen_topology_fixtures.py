#!/usr/bin/env python3
"""Writes the hwloc XML topologies the placement tests load (tests/placement/fixtures/).

They describe machines this one is not: two sockets with hyperthreads, and an 8-GPU server
whose GPUs hang off two NUMA nodes (four each), as in the field report's servers, plus the
same two-socket machine inside a cgroup whose cpuset allows only part of it. hwloc cannot
write such machines from a synthetic description (synthetic topologies have no PCI devices),
so this script writes the XML in hwloc 2's format directly; the tests load each file with
hwloc and check its shape (packages, nodes, cores, GPUs and their nodes) before using it.

Run: python3 tools/gen_topology_fixtures.py   (rewrites the files; they are committed)
"""
import os

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "tests", "placement", "fixtures")


def mask(bits):
    """hwloc's bitmap text: 32-bit words in hex, most significant first, comma-separated."""
    value = 0
    for b in bits:
        value |= 1 << b
    words = []
    while True:
        words.append(value & 0xFFFFFFFF)
        value >>= 32
        if value == 0:
            break
    return ",".join("0x%08x" % w for w in reversed(words))


class Writer:
    def __init__(self):
        self.lines = []
        self.gp = 0

    def next_gp(self):
        self.gp += 1
        return self.gp

    def sets(self, cpus, nodes, allowed_cpus=None, allowed_nodes=None, top=False):
        s = 'cpuset="%s" complete_cpuset="%s"' % (mask(cpus), mask(cpus))
        if top:
            s += ' allowed_cpuset="%s"' % mask(allowed_cpus if allowed_cpus is not None else cpus)
        s += ' nodeset="%s" complete_nodeset="%s"' % (mask(nodes), mask(nodes))
        if top:
            s += ' allowed_nodeset="%s"' % mask(
                allowed_nodes if allowed_nodes is not None else nodes)
        return s

    def add(self, depth, text):
        self.lines.append("  " * depth + text)


def machine(packages, cores_per_package, threads_per_core, gpus_per_package=0,
            allowed_cpus=None):
    """Each package is one NUMA node. PU numbering as Linux does it on Intel servers: the
    first thread of every core first (0..C-1 over all packages), then the second threads."""
    w = Writer()
    total_cores = packages * cores_per_package
    all_pus = list(range(total_cores * threads_per_core))
    all_nodes = list(range(packages))
    w.add(0, '<?xml version="1.0" encoding="UTF-8"?>')
    w.add(0, '<!DOCTYPE topology SYSTEM "hwloc2.dtd">')
    w.add(0, '<topology version="2.0">')
    w.add(1, '<object type="Machine" os_index="0" %s gp_index="%d">'
          % (w.sets(all_pus, all_nodes, allowed_cpus, None, top=True), w.next_gp()))
    w.add(2, '<info name="Backend" value="Linux"/>')
    gpu = 0
    for p in range(packages):
        cores = range(p * cores_per_package, (p + 1) * cores_per_package)
        pus = [c + t * total_cores for c in cores for t in range(threads_per_core)]
        w.add(2, '<object type="Package" os_index="%d" %s gp_index="%d">'
              % (p, w.sets(pus, [p]), w.next_gp()))
        w.add(3, '<object type="NUMANode" os_index="%d" %s gp_index="%d" local_memory="%d"/>'
              % (p, w.sets(pus, [p]), w.next_gp(), 256 << 30))
        for c in cores:
            core_pus = [c + t * total_cores for t in range(threads_per_core)]
            w.add(3, '<object type="Core" os_index="%d" %s gp_index="%d">'
                  % (c, w.sets(core_pus, [p]), w.next_gp()))
            for pu in core_pus:
                w.add(4, '<object type="PU" os_index="%d" %s gp_index="%d"/>'
                      % (pu, w.sets([pu], [p]), w.next_gp()))
            w.add(3, '</object>')
        for g in range(gpus_per_package):
            # One host bridge per GPU, as on servers with a PCIe switch per GPU pair or so.
            bus = 0x18 + 0x20 * gpu
            w.add(3, '<object type="Bridge" gp_index="%d" bridge_type="0-1" depth="0" '
                  'bridge_pci="0000:[%02x-%02x]">' % (w.next_gp(), bus, bus))
            w.add(4, '<object type="PCIDev" gp_index="%d" pci_busid="0000:%02x:00.0" '
                  'pci_type="0302 [10de:2330] [10de:16c1] a1" pci_link_speed="31.507692">'
                  % (w.next_gp(), bus))
            w.add(5, '<info name="PCIVendor" value="NVIDIA Corporation"/>')
            w.add(5, '<info name="PCIDevice" value="GH100 [H100 SXM5 80GB]"/>')
            w.add(4, '</object>')
            w.add(3, '</object>')
            gpu += 1
        w.add(2, '</object>')
    w.add(1, '</object>')
    w.add(0, '</topology>')
    return "\n".join(w.lines) + "\n"


def main():
    os.makedirs(OUT, exist_ok=True)
    files = {
        # 2 sockets x 8 cores x 2 threads: 32 PUs, nodes 0 and 1.
        "two_sockets.xml": machine(2, 8, 2),
        # 2 sockets x 16 cores, one thread each, 8 H100s: GPUs 0-3 on node 0, 4-7 on node 1.
        "eight_gpus.xml": machine(2, 16, 1, gpus_per_package=4),
        # two_sockets.xml in a cgroup whose cpuset is cores 4-11 (both threads): 4-7 on node
        # 0, 8-11 on node 1.
        "two_sockets_cgroup.xml": machine(
            2, 8, 2, allowed_cpus=list(range(4, 12)) + list(range(20, 28))),
    }
    for name, text in files.items():
        with open(os.path.join(OUT, name), "w") as f:
            f.write(text)
        print("wrote", os.path.join("tests/placement/fixtures", name))


if __name__ == "__main__":
    main()
