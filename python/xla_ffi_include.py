"""Prints the XLA FFI include directory of the jaxlib that `pip install .` installs beside, if any.

pip's build isolation takes the target environment off sys.path but not out of sysconfig, so a
jaxlib installed there is found by its path when it cannot be imported (python/CMakeLists.txt).
"""
import importlib.util
import os
import sysconfig

HEADER = os.path.join("xla", "ffi", "api", "ffi.h")
places = []
spec = importlib.util.find_spec("jaxlib")
if spec is not None and spec.submodule_search_locations:
    places += [os.path.join(p, "include") for p in spec.submodule_search_locations]
paths = sysconfig.get_paths()
places += [os.path.join(paths[k], "jaxlib", "include") for k in ("platlib", "purelib")]
for place in places:
    if os.path.isfile(os.path.join(place, HEADER)):
        print(place)
        break
