#!/usr/bin/env bash
# AMD compile check: compiles tests/amd/all_kernels.hip for one gfx target and checks that every kda kernel made it
# into the output. Usage: compile_check.sh <gfx90a|gfx942|gfx950> <compiler> <source dir> <work dir> <min kernels>
set -euo pipefail
arch=$1 compiler=$2 src=$3 work=$4 min_kernels=$5
mkdir -p "$work"
includes=(-I"$src/include" -I"$src/kernels")
case "$arch" in
  gfx90a)  # hipcc on clang 15: full compile and link (host + device)
    "$compiler" -std=c++17 --offload-arch=gfx90a "${includes[@]}" -x hip "$src/tests/amd/all_kernels.hip" \
      -o "$work/all_kernels_gfx90a"
    # The device code object is embedded in the executable; count the kernel descriptors in it.
    count=$(strings "$work/all_kernels_gfx90a" | grep '^_ZN3kda7kernels.*\.kd$' | sort -u | wc -l) ;;
  gfx942)  # Debian's device libraries stop at gfx940: device-only assembly, no link
    "$compiler" -std=c++17 -x hip --offload-arch=gfx942 -nogpulib --offload-device-only -S -I/usr/include \
      "${includes[@]}" "$src/tests/amd/all_kernels.hip" -o "$work/all_kernels_gfx942.s"
    count=$(grep -c '^[[:space:]]*\.amdhsa_kernel _ZN3kda7kernels' "$work/all_kernels_gfx942.s" || true) ;;
  gfx950)  # clang 22 with HIP 5.2 headers needs the wavefront macro and two builtin declarations
    "$compiler" -std=c++17 -x hip --offload-arch=gfx950 -nogpulib --offload-device-only -S -I/usr/include \
      -D__AMDGCN_WAVEFRONT_SIZE=64 -include "$src/tests/amd/hip52_clang22_compat.h" \
      "${includes[@]}" "$src/tests/amd/all_kernels.hip" -o "$work/all_kernels_gfx950.s"
    count=$(grep -c '^[[:space:]]*\.amdhsa_kernel _ZN3kda7kernels' "$work/all_kernels_gfx950.s" || true) ;;
  *) echo "unknown arch $arch" >&2; exit 2 ;;
esac
echo "$arch: $count kda kernels compiled (expected at least $min_kernels)"
[ "$count" -ge "$min_kernels" ]
