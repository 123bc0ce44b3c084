# SPDX-License-Identifier: BSD-3-Clause
# `flashattn-bench --list --sweep all` plans the sweep the project is judged on, without running it: every kind of row
# is there, the count is the sweep's, and no row is planned twice (the decode and serving sweeps share their dense
# one-token rows, which `all` must time once).
cmake_policy(VERSION 3.25)
execute_process(COMMAND "${BENCH}" --backend host --list --sweep all RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "flashattn-bench --list --sweep all exited with ${rc}: ${err}")
endif()
string(REPLACE "\n" ";" lines "${out}")
list(REMOVE_ITEM lines "")
list(LENGTH lines count)
set(unique ${lines})
list(REMOVE_DUPLICATES unique)
list(LENGTH unique distinct)
if(NOT count EQUAL distinct)
  message(FATAL_ERROR "--list --sweep all plans ${count} rows, only ${distinct} of them distinct")
endif()
# Prefill: 102 shapes (bf16 at D 64/96/128/192/256 and fp16 at D 64/128/256, 6 lengths, causal and not; bf16 GQA
# 32/8 D128 at 3 lengths, causal and not), fwd and bwd each. Decode and serving: 7 shapes dense and at 3 page sizes,
# and 4 query-token counts on the 6 shapes whose cache is 256 MiB or more.
if(NOT count EQUAL 256)
  message(FATAL_ERROR "--list --sweep all plans ${count} rows, not 204 prefill + 28 one-token decode + 24 multi-token")
endif()
foreach(want "fwd bf16 B=32 H=21/21 S=512/512 D=96" "bwd bf16 B=1 H=10/10 S=16384/16384 D=192 causal"
             "fwd bf16 B=8 H=32/8 S=2048/2048 D=128 causal" "bwd fp16 B=1 H=8/8 S=16384/16384 D=256"
             "decode bf16 B=1 H=32/8 Sq=1 L=8192 D=128" "decode bf16 B=64 H=32/8 Sq=1 L=8192 D=128 page=1"
             "decode bf16 B=1 H=32/8 Sq=16 L=65536 D=128 causal" "decode bf16 B=64 H=32/8 Sq=2 L=8192 D=128 causal")
  list(FIND lines "${want}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "--list --sweep all does not plan \"${want}\"")
  endif()
endforeach()
# (1, 8k) holds 32 MiB of K+V: one query token only.
if(out MATCHES "B=1 H=32/8 Sq=[0-9]+ L=8192 D=128 causal")
  message(FATAL_ERROR "--list --sweep all plans multi-token rows on the 32 MiB cache of (1, 8k)")
endif()
# The MLA rows (V/O head dim 128 under Q/K's 192) are a sweep of their own: `all` keeps the figures of the sweep the
# project is judged on comparable run to run, so it must not grow them.
if(out MATCHES "D=192/128")
  message(FATAL_ERROR "--list --sweep all plans MLA rows; they belong to --sweep mla only")
endif()
# The GPU plan of `--sweep mla`, listed without a GPU (a named backend needs no handle for --list): the MLA prefill
# (3 lengths x fwd and bwd) and the absorbed-MLA decode (5 caches x heads 128 and 16, 2 tokens and page 64 on one).
execute_process(COMMAND "${BENCH}" --backend cuda --list --sweep mla RESULT_VARIABLE rc OUTPUT_VARIABLE mla
                ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "flashattn-bench --backend cuda --list --sweep mla exited with ${rc}: ${err}")
endif()
string(REPLACE "\n" ";" mla_lines "${mla}")
list(REMOVE_ITEM mla_lines "")
list(LENGTH mla_lines mla_count)
if(NOT mla_count EQUAL 18)
  message(FATAL_ERROR "--list --sweep mla plans ${mla_count} rows, not 6 prefill + 12 decode: ${mla}")
endif()
foreach(want "fwd bf16 B=4 H=128/128 S=4096/4096 D=192/128 causal"
             "bwd bf16 B=1 H=128/128 S=16384/16384 D=192/128 causal"
             "decode bf16 B=1 H=128/1 Sq=1 L=32768 D=576/512 V=K" "decode bf16 B=128 H=16/1 Sq=1 L=2048 D=576/512 V=K"
             "decode bf16 B=32 H=128/1 Sq=2 L=8192 D=576/512 V=K causal"
             "decode bf16 B=32 H=128/1 Sq=1 L=8192 D=576/512 V=K page=64")
  list(FIND mla_lines "${want}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "--list --sweep mla does not plan \"${want}\"")
  endif()
endforeach()
# At least three of the decode caches hold 256 MiB or more (B*L*576*2 bytes), where the KV stream is the cost.
set(large 0)
foreach(line IN LISTS mla_lines)
  if(line MATCHES "^decode bf16 B=([0-9]+) H=[0-9]+/1 Sq=1 L=([0-9]+) D=576/512 V=K$")
    math(EXPR bytes "${CMAKE_MATCH_1} * ${CMAKE_MATCH_2} * 576 * 2")
    if(bytes GREATER_EQUAL 268435456)
      math(EXPR large "${large} + 1")
    endif()
  endif()
endforeach()
if(large LESS 6)
  message(FATAL_ERROR "--list --sweep mla plans ${large} dense one-token decode rows of >= 256 MiB, not 3+ per head count")
endif()
# The HOST plan: one small row of each kind, so that a run on a machine without a GPU ends in seconds.
execute_process(COMMAND "${BENCH}" --backend host --list --sweep mla RESULT_VARIABLE rc OUTPUT_VARIABLE host_mla
                ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "flashattn-bench --backend host --list --sweep mla exited with ${rc}: ${err}")
endif()
string(REPLACE "\n" ";" host_lines "${host_mla}")
list(REMOVE_ITEM host_lines "")
list(LENGTH host_lines host_count)
if(NOT host_count EQUAL 6)
  message(FATAL_ERROR "--backend host --list --sweep mla plans ${host_count} rows, not 2 prefill + 4 decode: ${host_mla}")
endif()
