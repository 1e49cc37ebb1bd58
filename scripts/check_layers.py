#!/usr/bin/env python3
"""The layers of alk, lowest first, and the check that the #include lines respect them.

A file may include a file of its own layer or of a layer below it (a lower rank), never one
above it nor one beside it (two layers of one rank, such as io and nn, know nothing of each
other). A backend's files (src/backend/<name>/) are private to that backend: nothing outside
it includes them; code above reaches a backend through the public headers (alk/device.h,
alk/kernel.h, alk/cuda.h, alk/cpu.h). Public headers (include/alk/) include public headers only.
Every directory of src/ must belong to a layer, so a new one has to be placed here.

Usage: check_layers.py [--root DIR]   (exit 1 and one line per violation)
       check_layers.py --self-test    (the check itself: it must flag planted violations)

ctest runs both (Layers.IncludesGoDown, Layers.CheckFindsViolations); the layer list matches
the build's targets (CMakeLists.txt, alk_layer) and docs/architecture.md.
"""
import argparse
import os
import re
import sys
import tempfile

# (rank, layer, paths): a path ending in "/" is a directory (and everything under it), else a
# file. Lower ranks are lower layers; equal ranks are siblings.
LAYERS = [
    (0, "base", ["src/core/"]),                       # alk_base: dtypes, errors, f16/bf16, Philox
    (1, "ir", ["src/expr/"]),                         # alk_ir: the op table's code, the expression IR, emitters
    (2, "runtime", ["src/runtime/"]),                 # alk_runtime: Buffer accounting, the probe list, disk cache
    (3, "backend cpu", ["src/backend/cpu/"]),         # the backends: each private to itself
    (3, "backend cuda", ["src/backend/cuda/"]),
    (3, "backend vulkan", ["src/backend/vulkan/"]),
    (4, "devices", ["src/backend/registry.cpp"]),     # alk_devices: the registry of what was found
    (5, "graph", ["src/graph/"]),                     # alk_tensor: lazy graph, autodiff, scheduler, compile
    (6, "front end", ["src/ops/"]),                   # alk_tensor: Tensor, creation, every op
    (7, "io", ["src/io/", "src/data/"]),              # alk_io: files, tokenizer, datasets
    (7, "nn", ["src/nn/", "src/optim/"]),             # alk_nn: modules, losses, optimizers
    (8, "dist", ["src/dist/"]),                       # alk_dist (on alk_nn)
    (8, "webgpu", ["src/webgpu/"]),                   # alk_webgpu (on alk_io)
    (8, "onnx", ["src/onnx/"]),                       # alk_onnx (on alk_io, alk_nn)
    (8, "pretrained", ["src/pretrained/"]),           # alk_pretrained: Hugging Face directories (on alk_io, alk_nn)
    (9, "train", ["src/train/"]),                     # alk_train (on alk_nn, alk_io, alk_dist)
    (9, "generate", ["src/generate/"]),               # alk_train: the generation engine (alk/generate.h)
    (10, "serve", ["src/serve/"]),                    # alk_serve: the OpenAI HTTP server over alk::Generator
    (11, "tools", ["tools/", "python/src/"]),         # the CLI and the Python module
]
BACKEND_PREFIX = "src/backend/"
PUBLIC_PREFIX = "include/alk/"
# Files scanned: the library, its public headers, the tools. Tests, benchmarks, fuzzers and
# examples may use internals (they test them), so they are not.
SCANNED = ["src/", "include/", "tools/", "python/src/"]
EXTENSIONS = (".h", ".cpp", ".inc", ".cu", ".cuh", ".def")
# Known exceptions, each with its reason: (including file, included file).
ALLOWED: set = set()

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer_of(path):
    """(rank, name) of the layer holding path (relative, with /), or None."""
    for rank, name, paths in LAYERS:
        for p in paths:
            if (p.endswith("/") and path.startswith(p)) or path == p:
                return rank, name
    return None


def backend_of(path):
    if path.startswith(BACKEND_PREFIX):
        rest = path[len(BACKEND_PREFIX):]
        if "/" in rest:
            return rest.split("/", 1)[0]
    return None


def resolve(root, including, target):
    """The repository path an include names: as the build's include paths see it (include/,
    src/, the repository root), then beside the including file. None: not ours (a system or
    generated header)."""
    for base in ("include", "src", "", os.path.dirname(including)):
        candidate = os.path.normpath(os.path.join(base, target))
        if os.path.isfile(os.path.join(root, candidate)):
            return candidate.replace(os.sep, "/")
    return None


def scanned_files(root):
    for top in SCANNED:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames.sort()
            for f in sorted(filenames):
                if f.endswith(EXTENSIONS):
                    yield os.path.relpath(os.path.join(dirpath, f), root).replace(os.sep, "/")


def check(root):
    problems = []
    src = os.path.join(root, "src")
    for d in sorted(os.listdir(src)) if os.path.isdir(src) else []:
        if os.path.isdir(os.path.join(src, d)) and d != "backend" and layer_of(f"src/{d}/x") is None:
            problems.append(f"src/{d}/: in no layer (add it to LAYERS in scripts/check_layers.py)")
    backend_dir = os.path.join(src, "backend")
    if os.path.isdir(backend_dir):
        for d in sorted(os.listdir(backend_dir)):
            full = os.path.join(backend_dir, d)
            rel = f"src/backend/{d}" + ("/x" if os.path.isdir(full) else "")
            if layer_of(rel) is None:
                problems.append(f"src/backend/{d}: in no layer (add it to LAYERS in scripts/check_layers.py)")
    for path in scanned_files(root):
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            lines = f.read().split("\n")
        for number, line in enumerate(lines, 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            target = resolve(root, path, m.group(1))
            if target is None or (path, target) in ALLOWED:
                continue
            where = f"{path}:{number}: includes {target}"
            if path.startswith(PUBLIC_PREFIX):
                if not target.startswith(PUBLIC_PREFIX):
                    problems.append(f"{where}: a public header includes a private one")
                continue
            if target.startswith(PUBLIC_PREFIX):
                continue
            mine, theirs = backend_of(path), backend_of(target)
            if theirs is not None and theirs != mine:
                problems.append(f"{where}: the {theirs} backend's private header, from outside it")
                continue
            have, want = layer_of(path), layer_of(target)
            if have is None or want is None:
                continue  # a directory without a layer is reported above
            if want[1] != have[1] and want[0] >= have[0]:
                kind = "beside" if want[0] == have[0] else "above"
                problems.append(f"{where}: layer '{want[1]}' is {kind} layer '{have[1]}'")
    return problems


def self_test():
    """Plants one violation of each kind in a small tree and expects each to be found, and
    nothing in a tree that keeps the rules."""
    files = {
        "include/alk/tensor.h": '#include "alk/dtype.h"\n',
        "include/alk/dtype.h": "",
        "include/alk/bad_public.h": '#include "graph/graph.h"\n',
        "src/core/half.h": "",
        "src/graph/graph.h": '#include "core/half.h"\n#include "alk/tensor.h"\n',
        "src/graph/upward.cpp": '#include "ops/ops.h"\n',
        "src/ops/ops.h": '#include "graph/graph.h"\n',
        "src/io/json.h": "",
        "src/nn/beside.cpp": '#include "io/json.h"\n',
        "src/backend/cpu/view.h": '#include "core/half.h"\n',
        "src/backend/cpu/kernels.cpp": '#include "backend/cpu/view.h"\n#include "view.h"\n',
        "src/backend/cuda/context.h": "",
        "src/backend/registry.cpp": "",
        "src/dist/private.cpp": '#include "backend/cuda/context.h"\n',
        "src/surprise/x.cpp": "",
    }
    expected = {
        "include/alk/bad_public.h:1",
        "src/graph/upward.cpp:1",
        "src/nn/beside.cpp:1",
        "src/dist/private.cpp:1",
        "src/surprise/",
    }
    with tempfile.TemporaryDirectory() as root:
        for path, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
            with open(os.path.join(root, path), "w") as f:
                f.write(text)
        found = {p.split(": ", 1)[0] for p in check(root)}
    if found != expected:
        print("check_layers self-test FAILED")
        print("  missed:   ", sorted(expected - found))
        print("  unexpected:", sorted(found - expected))
        return 1
    print(f"check_layers self-test: the {len(expected)} planted violations found, nothing else")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    problems = check(args.root)
    for p in problems:
        print(p)
    if problems:
        print(f"check_layers: {len(problems)} include(s) against the layers (scripts/check_layers.py says the order)")
        return 1
    print(f"check_layers: {sum(1 for _ in scanned_files(args.root))} files, every include goes down the layers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
