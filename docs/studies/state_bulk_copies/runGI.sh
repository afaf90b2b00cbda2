#!/usr/bin/env bash
# Call GI (round 34): the v78c speed-of-light probe (one bulk copy per tensor and chunk from a distinct region per head and chunk, wrong values) against main.
set -u
here=$(cd "$(dirname "$0")" && pwd)
export AB_FILTER='^(e2e/(single1k|single8k|single32k)/builder/manual_time|stage/state_recurrence/(single1k|single8k|single32k)/builder/manual_time)$'
AB_ROUNDS=3 AB_KERNEL=state_recurrence_mma_kernelINS_6bf16_tELi64ELi128ELi32ELi8ELb1ELi8E AB_DIR=$here \
  bash "$here/../scripts/profiling/device_ab.sh" base v78c
