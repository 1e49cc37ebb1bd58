#!/usr/bin/env python3
"""Mutation check (issue 43): small deliberate breaks of the library, one at a time, each built
and run against the tests of its area; every one must make at least one test fail.

  python3 scripts/mutation_check.py [BUILD_DIR] [ONLY_ID ...]

Each mutation edits one file of the working tree, builds alk_tests (and the CLI), runs the
gtest filter, records the failing tests, and puts the file back (also on error or Ctrl-C): run
it in a clean tree and never commit in the middle. Output: a Markdown table (docs/testing.md).
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# id, what it breaks, file, old text, new text, gtest filter, extra environment
MUTATIONS = [
    ("reduce-tail", "a dropped term in a reduction: the CPU's sum/prod block fold skips the last element of its tail",
     "src/backend/cpu/eval_impl.inc",
     "    for (; j < n; ++j) acc = op(acc, static_cast<Acc>(v[j]));",
     "    for (; j + 1 < n; ++j) acc = op(acc, static_cast<Acc>(v[j]));",
     "EvalReduce.*:Norms.*:Softmax.*:DeviceParity.Reductions:TorchParity.*", {}),
    ("gemm-tail", "an off-by-one in a GEMM tail: the CPU micro-kernel's edge tile stores one column too few",
     "src/backend/cpu/gemm_kernel.inc",
     "      for (int j = 0; j < nr; ++j) ci[j] = ti[j];",
     "      for (int j = 0; j + 1 < nr; ++j) ci[j] = ti[j];",
     "Matmul.*:GemmIsa.*:DeviceParity.Matmul:TorchParity.*", {}),
    ("vk-gemm-tail", "an off-by-one in a GEMM tail on Vulkan: the tiled shader zeroes B's last column",
     "src/backend/vulkan/kernels/matmul.cpp",
     '"  rb[i] = k < p.K && c < p.N ? "',
     '"  rb[i] = k < p.K && c + 1u < p.N ? "',
     "DeviceParity.Matmul:VulkanMatmul.*:VulkanMatmulDevice.*", {"ALK_VK_GEMM_SHARED": "1"}),
    ("softmax-offset", "a small absolute error (+1e-5) in Vulkan's softmax: under the old atol * max(1, max|cpu|) "
     "floor (5e-5) it passed",
     "src/backend/vulkan/kernels/reduce.cpp",
     "st1(b1 + uint(el1(i)), $EXP($X - mx) * inv);",
     "st1(b1 + uint(el1(i)), $EXP($X - mx) * inv + $M(1e-5));",
     "DeviceParity.SoftmaxAndNorms:DeviceParity.LargeShapes:VulkanSoftmax.*", {}),
    ("vk-refuses-f16", "a skipped kernel: Vulkan refuses every kernel with an f16 input",
     "src/backend/vulkan/vulkan_device.cpp",
     "  std::string unsupported(const Kernel& k) const {\n",
     "  std::string unsupported(const Kernel& k) const {\n    for (const auto& in : k.inputs)\n"
     "      if (in.dtype == DType::F16) return \"f16 refused (mutation)\";\n",
     "DeviceParity.*", {}),
    ("philox-key", "Philox's second key constant changed (every backend compared with core/philox.h)",
     "src/core/philox.h", "    k[1] += 0xBB67AE85u;", "    k[1] += 0xBB67AE87u;",
     "Random.*:DeviceParity.Random", {}),
    ("adam-eps", "Adam's epsilon inside the square root instead of added after it",
     "src/optim/optimizer.cpp", "/ (sqrt(v * c2) + o_.eps)", "/ sqrt(v * c2 + o_.eps)",
     "Optim.*:TorchOptim.*", {}),
    ("adam-bias-step", "Adam's second-moment bias correction one step ahead (beta2^(t+1))",
     "src/optim/optimizer.cpp", "(1.0 / (1.0 - pow(o_.beta2, t)))", "(1.0 / (1.0 - pow(o_.beta2, t + 1.0)))",
     "Optim.*:TorchOptim.*", {}),
    ("cpp-emit-ceil", "the C++ emitter spells f32 ceil as floor (the CPU's compiled tier)",
     "src/expr/emit_cpp.cpp",
     'case Fn::Ceil: return f32 ? "__builtin_ceilf" : "__builtin_ceil";',
     'case Fn::Ceil: return f32 ? "__builtin_floorf" : "__builtin_ceil";',
     "Jit.*:ExprEmit.*", {}),
    ("ckpt-commit-early", "checkpoint commit before the model file is written (manifest first)",
     "src/train/checkpoint.cpp",
     "    save_safetensors(sub + \"/model.safetensors\", model.state_dict(), model_meta);\n"
     "    test_pause_point(\"model\", step);\n",
     "    {\n      json::Object early;\n      early.emplace_back(\"step\", json::Value(step));\n"
     "      early.emplace_back(\"dir\", json::Value(rel));\n"
     "      write_file_atomic(dir + \"/\" + kManifest, json::dump(json::Value(std::move(early))) + \"\\n\", loc);\n    }\n"
     "    test_pause_point(\"model\", step);\n"
     "    save_safetensors(sub + \"/model.safetensors\", model.state_dict(), model_meta);\n",
     "CrashSafety.SigkillAtEach*:Resume.*", {}),
]


def run(cmd, env=None, timeout=3600):
    p = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=timeout)
    return p.returncode, p.stdout


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    only = set(sys.argv[2:])
    rows = []
    for mid, what, path, old, new, filt, extra in MUTATIONS:
        if only and mid not in only:
            continue
        full = os.path.join(ROOT, path)
        original = open(full).read()
        if original.count(old) != 1:
            rows.append((mid, what, "NOT APPLIED: the text to mutate is not in %s exactly once" % path))
            continue
        try:
            open(full, "w").write(original.replace(old, new))
            rc, out = run(["cmake", "--build", build, "-j2", "--target", "alk_tests"])
            if rc != 0:
                rows.append((mid, what, "does not build: " + out[-300:].replace("\n", " ")))
                continue
            env = dict(os.environ, **extra)
            env.setdefault("ALK_REQUIRE", "cpu vulkan")
            rc, out = run([os.path.join(build, "alk_tests"), "--gtest_brief=1", "--gtest_filter=" + filt], env=env)
            failed = sorted(set(re.findall(r"^\[  FAILED  \] (\S+\.\S+?)(?:,| \(|$)", out, re.M)))
            caught = ", ".join(failed) if failed else "NOT CAUGHT"
            rows.append((mid, what, caught))
            print("%s: %s" % (mid, caught), flush=True)
        finally:
            open(full, "w").write(original)
    print("\n| mutation | what it breaks | tests that fail |\n|---|---|---|")
    for mid, what, caught in rows:
        print("| %s | %s | %s |" % (mid, what, caught))
    if any(c.startswith("NOT") or c.startswith("does not") for _, _, c in rows):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
