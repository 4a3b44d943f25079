#!/usr/bin/env bash
# setup.sh: installs what normlab needs from Debian's packages (idempotent: nothing is fetched when
# everything is already there) and builds it in ./build. With --tests it also installs the test
# oracles (Debian's python3-torch), Debian's chromium (the report is tested in a headless browser),
# clang with libclang-rt-14-dev (libFuzzer's runtime is there: libclang_rt.fuzzer-x86_64.a)
# and makes build/pyenv, a venv that sees Debian's torch and numpy
# and has the official safetensors, transformers and tokenizers packages from PyPI (the oracles of
# the Hugging Face import/export and of the tokenizers) and sacrebleu (the oracle of `normlab bleu`),
# pandas and matplotlib (the Python module's tables and example); it builds the Python module
# (pybind11-dev, python3-dev), makes build/pyenv import it from build/python, and fetches the
# pretrained models the tests read into the cache (scripts/fetch_model.sh; once).
# Last, it builds the Bible translation corpus into ${NORMLAB_CACHE:-$HOME/.cache/normlab}/bible
# from Debian's SWORD modules (`normlab corpus bible`: a few seconds, once; nothing when present).
set -euo pipefail
cd "$(dirname "$0")/.."

want_tests=0
[[ "${1:-}" == "--tests" ]] && want_tests=1

packages=(g++ cmake ninja-build pkg-config libopenblas-openmp-dev libdnnl-dev libtomlplusplus-dev
          nlohmann-json3-dev libfmt-dev libcli11-dev libgtest-dev libeigen3-dev libspectra-dev libicu-dev
          curl unzip ca-certificates
          libopenmpi-dev openmpi-bin  # mpirun -np P normlab train|compare (src/distributed/)
          libsword-utils sword-text-kjv sword-text-web sword-text-sparv)  # the Bible corpus
if (( want_tests )); then
  packages+=(python3-torch python3-numpy python3-venv chromium fonts-dejavu-core
             pybind11-dev python3-dev  # the Python module normlab (python/; docs/PYTHON.md)
             clang libclang-rt-14-dev)  # the fuzz harnesses: clang 14 and its libFuzzer/ASan/UBSan runtimes
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if (( ${#missing[@]} )); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  (( EUID == 0 )) || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The test environments (pip) and the pretrained models the tests read (scripts/fetch_model.sh) come
# from the network while the build below keeps the CPU busy: they are made in the background and
# waited for after the build (a failure there stops the setup with its output). Each venv is created
# first, here: the build's configuration registers the tests that run with its python.
make_pyenv() {
  echo "setup: creating build/pyenv (Debian torch + safetensors, transformers, tokenizers, sacrebleu, gguf, accelerate, pandas, matplotlib from PyPI)"
  # transformers 4.45.x is the last line that runs with Debian's torch 1.13, which needs Debian's
  # numpy 1.x: numpy is pinned to that version so pandas and matplotlib do not pull numpy 2
  build/pyenv/bin/pip install -q --disable-pip-version-check "safetensors==0.8.0" \
    "transformers==4.45.2" "tokenizers==0.20.3" "sacrebleu==2.6.0" \
    "gguf==0.10.0" "sentencepiece==0.2.0" "protobuf==4.25.5" "accelerate==0.34.2" \
    "pandas==2.2.3" "matplotlib==3.9.2" "numpy==${debian_numpy}"  # gguf: llama.cpp's reader, the GGUF oracle; sentencepiece
    # and protobuf: the SentencePiece oracle and transformers' conversion of its models to tokenizer.json
}
# OLMo 2's parity needs transformers 4.47 (the newest that runs on Debian's torch 1.13), whose GGUF
# reader and tokenizers 0.21 differ from what the other checks pin: its own small environment
make_pyenv_tf447() {
  echo "setup: creating build/pyenv-tf447 (Debian torch + transformers 4.47.1: the OLMo 2 parity check)"
  build/pyenv-tf447/bin/pip install -q --disable-pip-version-check "safetensors==0.8.0" "transformers==4.47.1" \
    "tokenizers==0.21.4" "numpy==${debian_numpy}"
}
background=""
# a setup that stops early (a failed build) takes its background job with it
trap 'if [[ -n "$background" ]]; then pkill -P "$background" 2>/dev/null; kill "$background" 2>/dev/null; fi' EXIT
if (( want_tests )); then
  mkdir -p build
  debian_numpy=$(/usr/bin/python3 -c "import numpy; print(numpy.__version__)")
  need_pyenv=0 need_tf447=0
  build/pyenv/bin/python -c "import safetensors, torch, transformers, tokenizers, sacrebleu, gguf, sentencepiece, google.protobuf, accelerate, pandas, matplotlib" 2>/dev/null || need_pyenv=1
  build/pyenv-tf447/bin/python -c "import torch, safetensors, transformers; assert transformers.__version__ == '4.47.1'" 2>/dev/null || need_tf447=1
  (( need_pyenv )) && [[ ! -x build/pyenv/bin/python ]] && /usr/bin/python3 -m venv --system-site-packages build/pyenv
  (( need_tf447 )) && [[ ! -x build/pyenv-tf447/bin/python ]] && /usr/bin/python3 -m venv --system-site-packages build/pyenv-tf447
  (
    set -e
    (( need_pyenv )) && make_pyenv
    (( need_tf447 )) && make_pyenv_tf447
    for model in all-MiniLM-L6-v2 SmolLM2-135M-Instruct; do bash scripts/fetch_model.sh "$model" > /dev/null; done
  ) > build/setup-background.log 2>&1 &
  background=$!
fi

jobs=$(nproc)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DNORMLAB_PYTHON="$PWD/build/pyenv/bin/python" \
  -DNORMLAB_PYTHON_TF447="$PWD/build/pyenv-tf447/bin/python" >/dev/null
if (( want_tests )); then
  cmake --build build -j "$jobs"                  # everything: the tests, the benchmark, the Python module
  status=0
  wait "$background" || status=$?
  background=""
  if (( status != 0 )); then
    cat build/setup-background.log >&2
    echo "setup: the test environments or the pretrained models could not be made (the output above)" >&2
    exit 1
  fi
  grep '^setup:' build/setup-background.log || true
  # the test environment imports the module from the build (build/python/normlab): `import normlab`
  site=$(build/pyenv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  echo "$PWD/build/python" > "$site/normlab-build.pth"
else
  cmake --build build -j "$jobs" --target normlab # the main job needs only the command
fi

# The Bible translation corpus (es-en, web-kjv): kept when already built from the installed modules.
# The main job does not need it, so a failure here is reported and does not stop the setup.
./build/normlab corpus bible || echo "setup: warning: the Bible corpus was not built (see the error above)" >&2
