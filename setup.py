"""pip install . : builds the alk._C extension with CMake (the same build as `make python`) and
installs it with the pure-Python package from python/alk. Needs cmake, a C++20 compiler,
pybind11-dev and python3-dev; nothing is downloaded."""
import glob
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build = os.environ.get("ALK_PIP_BUILD_DIR", os.path.join(ROOT, "build-pip"))
        configure = ["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release", "-DALK_BUILD_TESTS=OFF",
                     f"-DPython_EXECUTABLE={sys.executable}"]
        if shutil.which("ninja"):
            configure += ["-G", "Ninja"]
        subprocess.check_call(configure)
        jobs = os.environ.get("JOBS", str(os.cpu_count() or 2))
        subprocess.check_call(["cmake", "--build", build, "--target", "alk_python", "-j", jobs])
        built = glob.glob(os.path.join(build, "python", "alk", "_C*.so"))
        if not built:
            raise RuntimeError(f"alk: the CMake build left no _C*.so in {build}/python/alk")
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(built[0], dest)


setup(
    name="alk",
    version="0.1.0",
    description="A tensor library with autodiff whose kernels are generated from one op table",
    packages=["alk", "alk.nn"],
    package_dir={"": "python"},
    package_data={"alk": ["py.typed", "*.pyi", "nn/*.pyi"]},
    ext_modules=[Extension("alk._C", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.9",
    zip_safe=False,
)
