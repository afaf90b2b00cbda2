#!/usr/bin/env bash
# AMD compile check: compiles tests/amd/all_kernels.hip for one gfx target and checks that every kda kernel made it
# into the output. Usage: compile_check.sh <gfx90a|gfx942|gfx950> <compiler> <source dir> <work dir> <min kernels>
set -euo pipefail
arch=$1 compiler=$2 src=$3 work=$4 min_kernels=$5
mkdir -p "$work"
includes=(-I"$src/include" -I"$src/kernels")
case "$arch" in
  gfx90a)  # hipcc on clang 15: full compile and link (host + device)
    "$compiler" -std=c++17 -O3 --offload-arch=gfx90a "${includes[@]}" -x hip "$src/tests/amd/all_kernels.hip" \
      -o "$work/all_kernels_gfx90a"
    # The device code object is embedded in the executable; count the kernel descriptors in it.
    count=$(strings "$work/all_kernels_gfx90a" | grep '^_ZN3kda7kernels.*\.kd$' | sort -u | wc -l) ;;
  gfx942)  # Debian's device libraries stop at gfx940: device-only assembly, no link
    "$compiler" -std=c++17 -O3 -x hip --offload-arch=gfx942 -nogpulib --offload-device-only -S -I/usr/include \
      "${includes[@]}" "$src/tests/amd/all_kernels.hip" -o "$work/all_kernels_gfx942.s"
    count=$(grep -c '^[[:space:]]*\.amdhsa_kernel _ZN3kda7kernels' "$work/all_kernels_gfx942.s" || true) ;;
  gfx950)  # clang 22 with HIP 5.2 headers needs the wavefront macro and two builtin declarations
    "$compiler" -std=c++17 -O3 -x hip --offload-arch=gfx950 -nogpulib --offload-device-only -S -I/usr/include \
      -D__AMDGCN_WAVEFRONT_SIZE=64 -include "$src/tests/amd/hip52_clang22_compat.h" \
      "${includes[@]}" "$src/tests/amd/all_kernels.hip" -o "$work/all_kernels_gfx950.s"
    count=$(grep -c '^[[:space:]]*\.amdhsa_kernel _ZN3kda7kernels' "$work/all_kernels_gfx950.s" || true) ;;
  *) echo "unknown arch $arch" >&2; exit 2 ;;
esac
echo "$arch: $count kda kernels compiled (expected at least $min_kernels)"
[ "$count" -ge "$min_kernels" ]

# The hot kernels must really take the matrix path: each instantiation contains MFMA instructions, and on gfx950
# the k32 form is used. (gfx90a is linked into an executable, so only the assembly targets are inspected.)
if [ "$arch" != gfx90a ]; then
  asm="$work/all_kernels_$arch.s"
  # kernel[:pattern]: only instantiations whose symbol matches the pattern (intra_chunk_mma with BT = 16 has no
  # off-diagonal tile, so only its BT = 32 / 64 forms must use the matrix units).
  for spec in state_recurrence_mma state_short_mma recompute_w_u_mma chunk_output_mma \
      'intra_chunk_mma:ELi(32|64)EEEv' chunk_prepare_mma chunk_prepare_inputs_mma \
      chunk_prepare_inputs_short_mma; do
    kernel=${spec%%:*}
    pattern=${spec#"$kernel"}; pattern=${pattern#:}
    # Per function body of that kernel: the number of v_mfma lines; every instantiation needs at least one.
    counts=$(awk -v k="$kernel" -v pat="$pattern" '
      $0 ~ "^_ZN3kda7kernels[0-9]+" k "_kernel.*:" && (pat == "" || $0 ~ pat) { on = 1; n = 0; next }
      on && /v_mfma/ { n++ }
      on && /s_endpgm/ { print n; on = 0 }' "$asm")
    [ -n "$counts" ] || { echo "$arch: no $kernel instantiation found"; exit 1; }
    zero=$(echo "$counts" | grep -cx 0 || true)
    echo "$arch: $kernel: $(echo "$counts" | wc -l) instantiations, MFMA counts $(echo $counts | tr ' ' ',')"
    [ "$zero" -eq 0 ] || { echo "$arch: $zero $kernel instantiations without MFMA"; exit 1; }
  done
  if [ "$arch" = gfx950 ]; then
    grep -q 'v_mfma_f32_16x16x32' "$asm" || { echo "gfx950: no v_mfma_f32_16x16x32 in the hot kernels"; exit 1; }
  fi
fi
