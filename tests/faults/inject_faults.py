#!/usr/bin/env python3
"""Writes deliberate kernel faults into a copy of the kda tree, to prove that the GPU suite catches each one.

    inject_faults.py TREE      edits TREE in place (never run it on your checkout; scripts/fault_build makes a copy)

Each fault is switched on at run time by the environment variable KDA_FAULT=<id> (0 or unset: none), so one faulty
build serves every fault. The switch is a per-translation-unit __device__ int set before main (kernels/kda/detail/
fault.hpp in the copy). NVIDIA only. An anchor that no longer matches the code fails loudly: update it with the code.
"""
import pathlib
import sys

SWITCH = '''// Deliberate faults for tests/faults (a copy of the tree only): KDA_FAULT=<id> switches fault <id> on.
#pragma once
#include <cstdlib>
namespace kda::fault {
static __device__ int g_id = 0;
__device__ inline bool on(int id) { return g_id == id; }
struct Init {
  Init() {
    const char* e = std::getenv("KDA_FAULT");
    const int id = e != nullptr ? std::atoi(e) : 0;
    (void)cudaMemcpyToSymbol(g_id, &id, sizeof id);
  }
};
static const Init init;
}  // namespace kda::fault
'''

# (id, what, file, anchor, replacement)
FAULTS = [
    (1, "the general state kernel skips the final-state store of the last sequence",
     "kernels/kda/state_recurrence_mma.hpp",
     "if (p.final_state != nullptr && slot >= 0 && !kCopiesFromCorner) {",
     "if (p.final_state != nullptr && slot >= 0 && !kCopiesFromCorner &&\n"
     "      !(kda::fault::on(1) && n == p.chunks.num_sequences - 1)) {"),
    (1, None, "kernels/kda/state_recurrence_mma.hpp",
     "} else if (p.final_state != nullptr && slot >= 0) {",
     "} else if (p.final_state != nullptr && slot >= 0 && !(kda::fault::on(1) && n == p.chunks.num_sequences - 1)) {"),
    (2, "the device derivation drops the last chunk of the table",
     "kernels/kda/chunk_metadata_device.hpp",
     "const int32_t nt = capped(run_total[kThreads - 1]);",
     "const int32_t nt =\n"
     "      capped(run_total[kThreads - 1]) - (kda::fault::on(2) && run_total[kThreads - 1] > 0 ? 1 : 0);"),
    (3, "the register-state kernel reads the initial state from the next pool slot",
     "kernels/kda/state_recurrence_regs_mma.hpp",
     "s = p.initial_state[state_offset(p, seq.slot, h, d, v)];",
     "s = p.initial_state[state_offset(p, kda::fault::on(3) ? (seq.slot + 1) % p.state_pool_size : seq.slot, h, d, "
     "v)];"),
    (4, "the general state kernel loses the carry across each sequence's first chunk boundary (decay 0)",
     "kernels/kda/state_recurrence_mma.hpp",
     "        r.glast[x] = d < K ? p.G[row_offset(chunk_start + length - 1, K) + d] : 0.0f;\n      }",
     "        r.glast[x] = d < K ? p.G[row_offset(chunk_start + length - 1, K) + d] : 0.0f;\n      }\n"
     "      if (kda::fault::on(4) && gid == seq.first_chunk) r.glast[x] = -1000.0f;"),
    (5, "the intra-chunk block reads beta one token late (the long-path prepare)",
     "kernels/kda/intra_chunk_mma.hpp",
     "detail::load_scalar(p.beta, p.beta_type, chunk.start + i, h, 0)",
     "detail::load_scalar(p.beta, p.beta_type, chunk.start + i + (kda::fault::on(5) && i + 1 < chunk.length), h, 0)"),
    (6, "the register-state kernel writes 0 into column 0 of o",
     "kernels/kda/state_recurrence_regs_mma.hpp",
     "          *reinterpret_cast<const uint4*>(&out_s[i * kLdO + part]);\n",
     "          *reinterpret_cast<const uint4*>(&out_s[i * kLdO + part]);\n"
     "      if (kda::fault::on(6) && v_warp + part == 0) o_out[detail::element_offset(p.o, start + i, h, 0)] = 0;\n"),
]


def main():
    tree = pathlib.Path(sys.argv[1])
    (tree / "kernels/kda/detail/fault.hpp").write_text(SWITCH)
    table = tree / "kernels/kda/detail/chunk_table.hpp"
    text = table.read_text()
    anchor = "#pragma once\n"
    assert text.count(anchor) == 1, "chunk_table.hpp: #pragma once"
    table.write_text(text.replace(anchor, anchor + '#include "fault.hpp"\n', 1))
    for fid, what, rel, old, new in FAULTS:
        path = tree / rel
        text = path.read_text()
        if text.count(old) != 1:
            sys.exit(f"fault {fid}: anchor found {text.count(old)} times in {rel}: {old!r}")
        path.write_text(text.replace(old, new, 1))
    for fid, what, *_ in FAULTS:
        if what:
            print(f"fault {fid}: {what}")


if __name__ == "__main__":
    main()
