#!/usr/bin/env python3
"""ONNX's light_resnet50.onnx with a variable batch dimension, for tensor-model throughput.

    .venv/bin/python tools/make_variable_batch_resnet.py [OUT] [--check]

The onnx package (requirements.txt pins 1.23.2) ships onnx/backend/test/data/light/
light_resnet50.onnx: a real ResNet-50 graph (opset 9, 53 convolutions) whose weights are built
at load time by ConstantOfShape nodes, so the file is 80 kB, but whose batch is fixed at 1.
This script makes the batch free and writes OUT (default models/light_resnet50.onnx):
  - the input gpu_0/data_0 [1,3,224,224] and the output gpu_0/softmax_1 [1,1000] get the
    symbolic first dimension "batch";
  - the Reshape before the classifier takes its shape from the constant OC2_DUMMY_1, [1,2048]:
    it becomes [-1,2048];
  - the graph input and initializer gpu_0/imagenet1k_blobs_queue_..._0, which no node uses,
    is dropped (ONNX Runtime warns about it at every load).
Nothing else changes; the output is deterministic for a given onnx package, and bootstrap
checks its SHA-256. --check also runs it with onnxruntime: batch 4 must equal four batch-1
runs row by row (it prints the largest difference, of the output and of the pooled features).
"""

import argparse
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(os.environ.get("PIER_MODELS", os.path.join(ROOT, "models")),
                           "light_resnet50.onnx")
SOURCE = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light",
                      "light_resnet50.onnx")
RESHAPE_SHAPE = "OC2_DUMMY_1"
UNUSED_PREFIX = "gpu_0/imagenet1k_blobs_queue_"


def make():
    m = onnx.load(SOURCE)
    g = m.graph
    for value in list(g.input[:1]) + list(g.output):
        dim = value.type.tensor_type.shape.dim[0]
        assert dim.dim_value == 1, f"{value.name}: expected batch 1, found {dim}"
        dim.Clear()
        dim.dim_param = "batch"
    (shape,) = [t for t in g.initializer if t.name == RESHAPE_SHAPE]
    assert list(numpy_helper.to_array(shape)) == [1, 2048], numpy_helper.to_array(shape)
    shape.CopyFrom(numpy_helper.from_array(np.array([-1, 2048], np.int64), RESHAPE_SHAPE))
    used = {name for node in g.node for name in node.input}
    for items in (g.initializer, g.input):
        for t in [t for t in items if t.name.startswith(UNUSED_PREFIX)]:
            assert t.name not in used, t.name
            items.remove(t)
    onnx.checker.check_model(m)
    return m


def check(path):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    for v in session.get_inputs() + session.get_outputs():
        print(f"  {v.name}: {v.type} {v.shape}")
    x = np.random.default_rng(0).standard_normal((4, 3, 224, 224)).astype(np.float32)
    # The softmax of this graph's constant weights is nearly flat: compare the pooled features
    # (r172, [N,2048,1,1]) too, which depend on the input.
    m = onnx.load(path)
    m.graph.output.append(onnx.helper.make_tensor_value_info("r172", onnx.TensorProto.FLOAT, None))
    session = ort.InferenceSession(m.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    batch = session.run(None, {"gpu_0/data_0": x})
    single = [session.run(None, {"gpu_0/data_0": x[i:i + 1]}) for i in range(4)]
    for k, name in enumerate(["gpu_0/softmax_1", "r172 (pooled features)"]):
        rows = np.concatenate([s[k] for s in single])
        assert batch[k].shape == rows.shape, (batch[k].shape, rows.shape)
        diff = float(np.abs(batch[k] - rows).max())
        print(f"  batch 4 vs 4 x batch 1, {name} {list(batch[k].shape)}: max |diff| {diff:.3g} "
              f"(values up to {float(np.abs(rows).max()):.3g})")
        assert diff <= 1e-4 * max(1.0, float(np.abs(rows).max())), diff


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", nargs="?", default=DEFAULT_OUT)
    ap.add_argument("--check", action="store_true", help="run it with onnxruntime (batch 1, 4)")
    args = ap.parse_args()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    m = make()
    with open(args.out + ".part", "wb") as f:
        f.write(m.SerializeToString())
    os.replace(args.out + ".part", args.out)
    print(f"wrote {args.out} ({os.path.getsize(args.out)} bytes)")
    if args.check:
        check(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
