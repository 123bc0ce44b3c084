#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The Python binding's CTest steps (bindings/python/CMakeLists.txt). Every step runs in WORK, a folder of the build
# tree, so the source tree gets no build or cache files:
#
#   run_tests.sh setup  WORK SRC PYTHON...   venv in WORK/venv, the package pip-installed into it from a copy of SRC
#   run_tests.sh host   WORK SRC LIBRARY     pytest, every test but the GPU ones
#   run_tests.sh gpu    WORK SRC LIBRARY     pytest -m gpu; 77 (skipped) without torch, a CUDA GPU or a CUDA build
#   run_tests.sh readme WORK SRC LIBRARY     runs the README's HOST example as written
#
# PYTHON... are candidate interpreters; the first that has NumPy, pytest, setuptools, wheel and venv is used (CMake
# may find Debian's /usr/bin/python3 while `python3` is pyenv's, or the other way round). Without any, the steps
# exit 77, which CTest reports as skipped.
set -euo pipefail

step=$1 work=$2 src=$3
shift 3
venv="$work/venv"
export PYTHONDONTWRITEBYTECODE=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

needs_setup() {
  if [ ! -x "$venv/bin/python" ] || [ ! -f "$work/ready" ]; then
    echo "python binding: no working venv in $work (the setup step was skipped or failed)"
    exit 77
  fi
}

case "$step" in
  setup)
    python=""
    for candidate in "${FLASHATTN_PYTHON:-}" "$@" "$(command -v python3 || true)" /usr/bin/python3; do
      [ -n "$candidate" ] && [ -x "$candidate" ] || continue
      if "$candidate" -c 'import numpy, pytest, setuptools, wheel, venv' 2>/dev/null &&
        { "$candidate" -c 'import ensurepip' 2>/dev/null || "$candidate" -m pip --version >/dev/null 2>&1; }; then
        python=$candidate
        break
      fi
      echo "python binding: $candidate lacks one of numpy, pytest, setuptools, wheel, venv, ensurepip or pip"
    done
    if [ -z "$python" ]; then
      echo "python binding: no python3 with numpy, pytest, setuptools, wheel and venv (Debian: apt-get install" \
        "python3-venv python3-pip python3-numpy python3-pytest)"
      exit 77
    fi
    echo "python binding: using $python ($("$python" --version 2>&1))"
    rm -rf "$work"
    mkdir -p "$work"
    pip=("$venv/bin/python" -m pip)
    if "$python" -c 'import ensurepip' 2>/dev/null; then
      "$python" -m venv --system-site-packages "$venv"
    else
      # No ensurepip (a distribution's python without its venv package): the interpreter's own pip installs into
      # the venv instead.
      "$python" -m venv --system-site-packages --without-pip "$venv"
      pip=("$python" -m pip --python "$venv/bin/python")
    fi
    # --system-site-packages shows the base interpreter's packages only; when $python is itself a venv (as on the
    # GPU machine), its own site-packages come through a .pth file.
    "$python" -c 'import site, sys; print("\n".join(p for p in site.getsitepackages() if p.startswith(sys.prefix)))' \
      >"$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/flashattn-parent.pth"
    cp -r "$src" "$work/src"
    rm -rf "$work/src/build" "$work/src"/src/*.egg-info
    # Offline: no index, the build backend (setuptools) from the interpreter's own packages.
    "${pip[@]}" install --quiet --no-index --no-build-isolation --no-deps "$work/src"
    "$venv/bin/python" -c 'import flashattn, sys; print("python binding: installed", flashattn.__file__)'
    touch "$work/ready"
    ;;
  host | gpu)
    needs_setup
    export FLASHATTN_LIBRARY=$1
    export FLASHATTN_TESTDATA="$src/../testdata" FLASHATTN_SPEC="$src/../spec/flashattn_api.json"
    cd "$work"
    if [ "$step" = gpu ]; then
      if ! "$venv/bin/python" -c '
import sys, flashattn
try:
    import torch
except ImportError:
    sys.exit("no torch")
if not torch.cuda.is_available():
    sys.exit("torch sees no CUDA GPU")
try:
    flashattn.Handle(flashattn.Backend.CUDA).close()
except flashattn.Error as e:
    sys.exit("the library has no usable CUDA backend: %s" % e)
'; then
        echo "python binding: GPU tests skipped"
        exit 77
      fi
      exec "$venv/bin/python" -m pytest -p no:cacheprovider -rs -m gpu "$work/src/tests"
    fi
    exec "$venv/bin/python" -m pytest -p no:cacheprovider -rs -m "not gpu" "$work/src/tests"
    ;;
  readme)
    needs_setup
    export FLASHATTN_LIBRARY=$1
    # The fenced python block after the marker line, run exactly as the README shows it.
    "$venv/bin/python" - "$src/README.md" >"$work/readme_example.py" <<'EOF'
import re, sys
text = open(sys.argv[1], encoding="utf-8").read()
m = re.search(r"<!-- ctest: host example -->\s*```python\n(.*?)```", text, re.S)
if not m:
    sys.exit("README.md has no python block after <!-- ctest: host example -->")
print(m.group(1), end="")
EOF
    cd "$work"
    exec "$venv/bin/python" "$work/readme_example.py"
    ;;
  *)
    echo "usage: $0 setup|host|gpu|readme WORK SRC ..." >&2
    exit 2
    ;;
esac
