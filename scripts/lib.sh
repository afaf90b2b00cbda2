# Shared by scripts/test and scripts/bench: package installation and the CMake configure step.

# Installs the Debian packages named in "$@" that are not installed yet (apt-get update once, only if needed).
kda_ensure_packages() {
  local missing=()
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "kda: installing ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# Packages every build needs (host compiler, CMake, ninja, GoogleTest, Google Benchmark).
KDA_BASE_PACKAGES=(build-essential cmake ninja-build googletest libgtest-dev libgmock-dev libbenchmark-dev)
# The Python package's host tests (ctest label python): Debian's interpreter, pytest and numpy; no torch.
KDA_PYTHON_PACKAGES=(python3 python3-pytest python3-numpy)
# AMD compile checks: HIP 5.2 + rocPRIM from Debian, and the clang versions that reach gfx942 / gfx950.
KDA_AMD_PACKAGES=(libamdhip64-dev librocprim-dev hipcc clang-19 lld-19 clang-22 lld-22)

# nvcc lives outside PATH on a fresh machine.
kda_cuda_path() {
  if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH="/usr/local/cuda/bin:$PATH"
  fi
}

kda_jobs() { nproc 2>/dev/null || echo 2; }
