#!/usr/bin/env python3
"""Tiny ONNX graphs for the tensor-model tests (issue #44), and their fixture.

    .venv/bin/python tools/gen_onnx_test_models.py [--models models/onnx-tiny]
        (what scripts/bootstrap runs: the onnx package only; writes the graphs and checks each
        file's SHA-256, inputs and outputs against tests/fixtures/tensor_models/onnx_tiny.json)
    .venv/bin/python tools/gen_onnx_test_models.py --write-fixture
        (rewrites the fixture from the graphs made now; run it after changing a graph)

Each graph exercises one thing the loader, batcher or KServe front end must handle:
  add_mul.onnx          a, b FP32 [batch,4] -> sum = a+b, product = a*b (two inputs, two outputs)
  types.onnx            one Identity per KServe type but FP32: in_<t> -> out_<t>, each [batch,3]
  fixed.onnx            no batch dimension: x FP32 [2,3] -> y = 2*x
  spatial.onnx          x FP32 [batch,1,H,W] (H, W free) -> y = mean over H,W [batch,1], z = x*1
  big_constant.onnx     a few hundred bytes that build 256 MiB at run time (a [1,2^26] constant
                        of ones added to x [batch,1], then the row maximum: y = x+1 [batch,1]),
                        for the working-memory budget tests
  no_batch_scaling.onnx x FP32 [batch,4] -> y = sum over the batch, declared [batch,4] but [1,4]
                        when it runs: only running it shows the output does not scale
  unknown_op.onnx       a node of an operator no domain defines: ONNX Runtime refuses the model
  slow.onnx             x FP32 [batch,256] -> y after a Loop of MatMul+Tanh with a 256x256
                        weight (about 1-2 s at batch 1 on one thread), for the cancel test

Opset 17 (IR 8), which any ONNX Runtime since 1.14 runs. The files depend only on the onnx
package and numpy (pinned in requirements.txt): weights come from numpy's seeded generator and
the model carries no version strings, so bootstrap makes them again byte for byte and no model
file is committed.
"""

import argparse
import hashlib
import json
import os
import re
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MODELS = os.path.join(os.environ.get("PIER_MODELS", os.path.join(ROOT, "models")),
                              "onnx-tiny")
DEFAULT_FIXTURE = os.path.join(ROOT, "tests", "fixtures", "tensor_models", "onnx_tiny.json")
OPSET = 17
IR_VERSION = 8
PRODUCER = "pier tools/gen_onnx_test_models.py"

# ONNX element type -> KServe v2 datatype (what Pier's metadata reports).
KSERVE_TYPES = {
    TensorProto.FLOAT: "FP32", TensorProto.FLOAT16: "FP16", TensorProto.DOUBLE: "FP64",
    TensorProto.INT64: "INT64", TensorProto.INT32: "INT32", TensorProto.INT8: "INT8",
    TensorProto.UINT8: "UINT8", TensorProto.BOOL: "BOOL", TensorProto.STRING: "BYTES",
}
BIG_CONSTANT_ELEMENTS = 1 << 26  # FP32: 256 MiB
SLOW_WIDTH = 256
SLOW_STEPS = 150000  # Loop trips: about 1-2 s at batch 1 on one thread (the fixture states it)


def tensor(name, elem_type, shape):
    return helper.make_tensor_value_info(name, elem_type, shape)


def const(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def model(graph, check=True):
    m = helper.make_model(graph, producer_name=PRODUCER,
                          opset_imports=[helper.make_opsetid("", OPSET)])
    m.ir_version = IR_VERSION
    if check:
        onnx.checker.check_model(m, full_check=True)
    return m


def add_mul():
    inputs = [tensor("a", TensorProto.FLOAT, ["batch", 4]),
              tensor("b", TensorProto.FLOAT, ["batch", 4])]
    outputs = [tensor("sum", TensorProto.FLOAT, ["batch", 4]),
               tensor("product", TensorProto.FLOAT, ["batch", 4])]
    nodes = [helper.make_node("Add", ["a", "b"], ["sum"]),
             helper.make_node("Mul", ["a", "b"], ["product"])]
    return model(helper.make_graph(nodes, "add_mul", inputs, outputs))


def types():
    kinds = [("fp16", TensorProto.FLOAT16), ("fp64", TensorProto.DOUBLE),
             ("int64", TensorProto.INT64), ("int32", TensorProto.INT32),
             ("int8", TensorProto.INT8), ("uint8", TensorProto.UINT8),
             ("bool", TensorProto.BOOL), ("string", TensorProto.STRING)]
    inputs = [tensor(f"in_{k}", t, ["batch", 3]) for k, t in kinds]
    outputs = [tensor(f"out_{k}", t, ["batch", 3]) for k, t in kinds]
    nodes = [helper.make_node("Identity", [f"in_{k}"], [f"out_{k}"]) for k, _ in kinds]
    return model(helper.make_graph(nodes, "types", inputs, outputs))


def fixed():
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "two"], ["y"])], "fixed",
        [tensor("x", TensorProto.FLOAT, [2, 3])], [tensor("y", TensorProto.FLOAT, [2, 3])],
        initializer=[const("two", np.float32(2.0))])
    return model(graph)


def spatial():
    graph = helper.make_graph(
        [helper.make_node("ReduceMean", ["x"], ["y"], axes=[2, 3], keepdims=0),
         helper.make_node("Mul", ["x", "one"], ["z"])], "spatial",
        [tensor("x", TensorProto.FLOAT, ["batch", 1, "H", "W"])],
        [tensor("y", TensorProto.FLOAT, ["batch", 1]),
         tensor("z", TensorProto.FLOAT, ["batch", 1, "H", "W"])],
        initializer=[const("one", np.float32(1.0))])
    return model(graph)


def big_constant():
    # ones [1, 2^26] (256 MiB), x + ones [batch, 2^26] (256 MiB per row), y its row maximum:
    # the file is tiny, the working memory is not, and y = x + 1 exactly.
    nodes = [
        helper.make_node("ConstantOfShape", ["ones_shape"], ["ones"],
                         value=numpy_helper.from_array(np.array([1.0], np.float32))),
        helper.make_node("Add", ["x", "ones"], ["wide"]),
        helper.make_node("ReduceMax", ["wide"], ["y"], axes=[1], keepdims=1),
    ]
    graph = helper.make_graph(
        nodes, "big_constant", [tensor("x", TensorProto.FLOAT, ["batch", 1])],
        [tensor("y", TensorProto.FLOAT, ["batch", 1])],
        initializer=[const("ones_shape", np.array([1, BIG_CONSTANT_ELEMENTS], np.int64))])
    return model(graph)


def no_batch_scaling():
    graph = helper.make_graph(
        # The axes ([0]) are computed from x's shape (batch - batch), so shape inference cannot
        # see them and keeps the declared [batch,4]: only running it shows y does not scale.
        [helper.make_node("Shape", ["x"], ["shape"]),
         helper.make_node("Slice", ["shape", "axis0", "one"], ["batch_dim"]),
         helper.make_node("Sub", ["batch_dim", "batch_dim"], ["axes"]),
         helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=1)], "no_batch_scaling",
        [tensor("x", TensorProto.FLOAT, ["batch", 4])], [tensor("y", TensorProto.FLOAT, ["batch", 4])],
        initializer=[const("axis0", np.array([0], np.int64)),
                     const("one", np.array([1], np.int64))])
    return model(graph)


def unknown_op():
    graph = helper.make_graph(
        [helper.make_node("NoSuchOp", ["x"], ["y"])], "unknown_op",
        [tensor("x", TensorProto.FLOAT, ["batch", 4])],
        [tensor("y", TensorProto.FLOAT, ["batch", 4])])
    return model(graph, check=False)  # the checker refuses it too: that is the point


def slow():
    # y = state after SLOW_STEPS trips of state = tanh(state @ w), w [256,256] seeded: each trip
    # is one small MatMul, so ONNX Runtime checks its terminate flag between them.
    rng = np.random.default_rng(44)
    w = (rng.standard_normal((SLOW_WIDTH, SLOW_WIDTH)) / np.sqrt(SLOW_WIDTH)).astype(np.float32)
    body = helper.make_graph(
        [helper.make_node("MatMul", ["state_in", "w"], ["mm"]),
         helper.make_node("Tanh", ["mm"], ["state_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "slow_body",
        [tensor("iter", TensorProto.INT64, []), tensor("cond_in", TensorProto.BOOL, []),
         tensor("state_in", TensorProto.FLOAT, ["batch", SLOW_WIDTH])],
        [tensor("cond_out", TensorProto.BOOL, []),
         tensor("state_out", TensorProto.FLOAT, ["batch", SLOW_WIDTH])])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["trips", "keep_going", "x"], ["y"], body=body)], "slow",
        [tensor("x", TensorProto.FLOAT, ["batch", SLOW_WIDTH])],
        [tensor("y", TensorProto.FLOAT, ["batch", SLOW_WIDTH])],
        initializer=[const("trips", np.array(SLOW_STEPS, np.int64)),
                     const("keep_going", np.array(True)), const("w", w)])
    return model(graph)


MODELS = {
    "add_mul": add_mul, "types": types, "fixed": fixed, "spatial": spatial,
    "big_constant": big_constant, "no_batch_scaling": no_batch_scaling,
    "unknown_op": unknown_op, "slow": slow,
}


def describe(values):
    """Names, types and shapes as the model declares them; a free dimension is -1 in `shape`
    and its name in `dim_params` ("" for a fixed one), as ONNX Runtime's C API reports them."""
    out = []
    for v in values:
        t = v.type.tensor_type
        dims = t.shape.dim
        out.append({
            "name": v.name,
            "datatype": KSERVE_TYPES[t.elem_type],
            "onnx_type": TensorProto.DataType.Name(t.elem_type),
            "shape": [d.dim_value if d.HasField("dim_value") else -1 for d in dims],
            "dim_params": [d.dim_param for d in dims],
        })
    return out


def check_with_onnxruntime(folder, entries):
    """Before a fixture is written: every graph but unknown_op loads and runs in ONNX Runtime
    (unknown_op must be refused), and slow.onnx's run time at batch 1 on one thread is
    measured into its entry."""
    import time
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    for name in entries:
        path = os.path.join(folder, f"{name}.onnx")
        if name == "unknown_op":
            try:
                ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
            except Exception as error:  # onnxruntime raises its own exception types
                print(f"unknown_op.onnx refused as it should be: {str(error).splitlines()[0]}")
                continue
            sys.exit("gen_onnx_test_models: ONNX Runtime accepted unknown_op.onnx")
        if name == "big_constant":
            continue  # 512 MiB at batch 1: loading it is enough
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        feeds = {}
        for i in session.get_inputs():
            shape = [d if isinstance(d, int) else 1 for d in i.shape]
            if i.type == "tensor(string)":
                feeds[i.name] = np.full(shape, "x", dtype=object)
            else:
                dtype = {"tensor(float16)": np.float16, "tensor(double)": np.float64,
                         "tensor(bool)": np.bool_}.get(i.type, None)
                dtype = dtype or np.dtype(i.type[len("tensor("):-1].replace("float", "float32"))
                feeds[i.name] = np.ones(shape, dtype=dtype)
        start = time.perf_counter()
        session.run(None, feeds)
        seconds = time.perf_counter() - start
        if name == "slow":
            entries[name]["seconds_batch1_one_thread"] = round(seconds, 2)
            print(f"slow.onnx: {seconds:.2f} s at batch 1 on one thread")


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=DEFAULT_MODELS, help="where the .onnx files go")
    ap.add_argument("--fixture", default=DEFAULT_FIXTURE, help="the fixture to check or write")
    ap.add_argument("--write-fixture", action="store_true",
                    help="rewrite the fixture from the graphs made now instead of checking them")
    args = ap.parse_args()
    os.makedirs(args.models, exist_ok=True)
    entries = {}
    for name, make in MODELS.items():
        path = os.path.join(args.models, f"{name}.onnx")
        m = make()
        with open(path + ".part", "wb") as f:
            f.write(m.SerializeToString())
        os.replace(path + ".part", path)
        entries[name] = {
            "file": f"{name}.onnx",
            "sha256": sha256(path),
            "bytes": os.path.getsize(path),
            "opset": OPSET,
            "inputs": describe(m.graph.input),
            "outputs": describe(m.graph.output),
        }
    if args.write_fixture:
        check_with_onnxruntime(args.models, entries)
        os.makedirs(os.path.dirname(args.fixture), exist_ok=True)
        with open(args.fixture, "w") as f:
            text = json.dumps({"generator": "tools/gen_onnx_test_models.py",
                               "models_dir": "models/onnx-tiny", "models": entries}, indent=1)
            # Shapes and dim names on one line each: the file reads as a table.
            text = re.sub(r"\[\s+([^\[\]{}]*?)\s+\]",
                          lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]",
                          text)
            f.write(text + "\n")
        print(f"wrote {len(entries)} models to {args.models} and {args.fixture}")
        return 0
    with open(args.fixture) as f:
        want = json.load(f)["models"]
    bad = []
    for name, entry in entries.items():
        w = want.get(name)
        if w is None:
            bad.append(f"{name}: not in the fixture")
        elif any(w[k] != entry[k] for k in ("sha256", "inputs", "outputs")):
            bad.append(f"{name}.onnx: SHA-256 {entry['sha256']}, the fixture states {w['sha256']}")
    if bad:
        for name in entries:
            os.remove(os.path.join(args.models, f"{name}.onnx"))
        sys.exit("gen_onnx_test_models: the graphs differ from " + args.fixture + " (another onnx "
                 "or numpy than requirements.txt pins?):\n  " + "\n  ".join(bad))
    print(f"{len(entries)} ONNX test models in {args.models}, as the fixture states")
    return 0


if __name__ == "__main__":
    sys.exit(main())
