#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The one script sent to the GPU machine. Runs in the repository root with $OUT set; every step is timed and logged,
# and what comes back under $OUT stays a handful of files:
#   summary.txt   one line per step (status, seconds), then the tail of each failed step's log
#   logs.tar.gz   the full log of every step (refreshed after each step, so a killed run still returns them)
#   ours.json     flashattn-bench rows (rewritten after every shape)       [bench]
#   peers.json    peers.py rows                                             [peers]
#   fa3.json      FlashAttention-3 rows (fa3_jax.py)                        [fa3]
#   report.md     ours joined with the peers                                [report]
#
# usage: bench/device_run.sh [PART [SWEEP]]...
#   info                 nvidia-smi (always runs first)
#   build                configure (CMake preset `device` when CMakePresets.json has one) and build with -j$BUILD_JOBS
#   tests                build, then ctest -L 'gpu|choosers' (every GPU suite twice: the chooser's pick, and the
#                        portable families pinned; the choosers on fake devices)
#   ptx80                a second, small build whose only CUDA code is compute_80 PTX (head dim 256, fp16), run on
#                        this GPU: the decode planner must plan only what that code has (test_gpu_decode)
#   sanitize             build, then compute-sanitizer memcheck/racecheck/initcheck/synccheck over the GPU tests
#                        with FLASHATTN_TEST_SLICE=edge
#   peers [SWEEP]        python3 .peers/peers.py (SWEEP prefill|decode|all sets PEERS; default $PEERS or all), or
#                        $PEERS_SCRIPT instead (bench/peers_forward.py: the prefill sweep's forward only);
#                        SWEEP mla runs bench/peers_mla.py unless $PEERS_SCRIPT names another: SDPA's backends on
#                        the MLA prefill shapes (D192, Dv128), fwd and bwd
#   fa3                  FlashAttention-3's JAX wheel (.peers/flash_attn3_jax-*.whl, installed into /tmp) timed by
#                        .peers/fa3_jax.py: head dim 128, MHA and GQA 32/8 (FA3_SEQS, FA3_HEADS narrow it; the full
#                        set takes about 4 minutes); the report then shows ours / FA3 and ours / the best peer
#   bench [SWEEP]        build, then flashattn-bench --sweep SWEEP --json $OUT/ours.json (default $BENCH_SWEEP or all;
#                        serving: paged and multi-token decode, whose report wants the peers' decode rows; chunked;
#                        mla: DeepSeek-V3's prefill, D192 with Dv128, H128, causal, S 4k/8k/16k, fwd and bwd, which
#                        `all` leaves out; its report wants `peers mla`)
#   report               bench/report.py over $OUT/ours.json, $OUT/peers.json (and $OUT/fa3.json when there)
#   variants             bench/forward_sm90_variants/run.sh $VARIANT_ARGS: forward_sm90 kernel configurations timed
#                        side by side (its own small build); the table goes to $OUT/variants.txt
#   baseline             the previous build (.baseline/source.tar, a git archive of it) against this one: both
#                        flashattn-bench sweeps twice (BASELINE_ROUNDS), interleaved, --no-check; bench/compare.py ->
#                        $OUT/baseline.md, the rounds' JSON in $OUT/baseline-rounds.tar.gz
#   all                  build tests sanitize peers bench report
# Without arguments: $DEVICE_RUN_PARTS, or `tests`.
#
# Environment: BUILD_JOBS (16), CMAKE_ARGS (extra configure arguments), CTEST_ARGS (extra, e.g. "-R forward"),
# SANITIZE_TOOLS ("memcheck racecheck initcheck synccheck"), SANITIZE_FILTER (regex on test executable names),
# BENCH_ARGS (extra flashattn-bench arguments, e.g. "--dtype bf16 --dim 128"), FLASHATTN_BENCH_COMMIT (recorded in
# ours.json), BUILD_DIR (build folder, bypassing the preset; default build-device), DEVICE_BUDGET_S (570: the
# script cuts its steps short so that it ends before the device tool's 10-minute limit).
set -u

OUT="${OUT:?OUT must name the folder whose files come back}"
mkdir -p "$OUT"
ROOT="$(pwd)"
START=$(date +%s)
BUDGET="${DEVICE_BUDGET_S:-570}"
JOBS="${BUILD_JOBS:-16}"
LOGS="$(mktemp -d /tmp/device_run.XXXXXX)/logs"
mkdir -p "$LOGS"
SUMMARY="$OUT/summary.txt"
STEPS="$LOGS/steps.txt"
: >"$STEPS"
ARGS_TEXT="$*"
FAILED_STEPS=()
# A tree that differs from its HEAD (edits, or a copy whose .git is older than its files) is marked, so that its
# figures are never filed under a commit they did not come from.
if [ -z "${FLASHATTN_BENCH_COMMIT:-}" ] && commit=$(git rev-parse --short HEAD 2>/dev/null); then
  git diff --quiet HEAD -- 2>/dev/null || commit="$commit+dirty"
  export FLASHATTN_BENCH_COMMIT="$commit"
fi

# ---------------------------------------------------------------------------------------------------------- parts
parts=()
sweep_peers="${PEERS:-all}"
sweep_bench="${BENCH_SWEEP:-all}"
args=("$@")
[ ${#args[@]} -eq 0 ] && read -r -a args <<<"${DEVICE_RUN_PARTS:-tests}"
i=0
while [ $i -lt ${#args[@]} ]; do
  a="${args[$i]}"
  next="${args[$((i + 1))]:-}"
  case "$a" in
    info | build | tests | sanitize | report | ptx80 | baseline | fa3 | variants) parts+=("$a") ;;
    peers | bench)
      parts+=("$a")
      if [ "$next" = prefill ] || [ "$next" = decode ] || [ "$next" = mla ] || [ "$next" = all ] ||
        { [ "$a" = bench ] && { [ "$next" = serving ] || [ "$next" = chunked ]; }; }; then
        if [ "$a" = peers ]; then sweep_peers="$next"; else sweep_bench="$next"; fi
        i=$((i + 1))
      fi
      ;;
    all) parts+=(build tests sanitize peers bench report) ;;
    *) echo "device_run.sh: unknown part '$a' (info build tests sanitize peers fa3 variants bench report all)" >&2; exit 2 ;;
  esac
  i=$((i + 1))
done
wants() { local p; for p in "${parts[@]}"; do [ "$p" = "$1" ] && return 0; done; return 1; }

# ---------------------------------------------------------------------------------------------------------- steps
remaining() { echo $((BUDGET - ($(date +%s) - START))); }

write_summary() {
  {
    echo "device_run.sh $ARGS_TEXT: parts ${parts[*]} (peers sweep $sweep_peers, bench sweep $sweep_bench)"
    echo "elapsed $(($(date +%s) - START)) s of a $BUDGET s budget"
    cat "$STEPS"
    for s in "${FAILED_STEPS[@]}"; do
      echo
      echo "---- tail of $s.log"
      tail -n 40 "$LOGS/$s.log" 2>/dev/null
    done
  } >"$SUMMARY"
  tar -czf "$OUT/logs.tar.gz.tmp" -C "$(dirname "$LOGS")" logs 2>/dev/null &&
    mv "$OUT/logs.tar.gz.tmp" "$OUT/logs.tar.gz"
}

# step NAME TIMEOUT_S COMMAND...: runs COMMAND with its output in $LOGS/NAME.log, within the budget left.
step() {
  local name="$1" limit="$2"
  shift 2
  local left
  left=$(($(remaining) - 15))
  if [ "$left" -lt 5 ]; then
    printf '%-24s SKIPPED (budget spent)\n' "$name" | tee -a "$STEPS"
    FAILED_STEPS+=("$name")
    echo "skipped: the ${BUDGET}s budget was spent" >"$LOGS/$name.log"
    write_summary
    return 124
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "==> $name (limit ${limit}s)"
  local t0 rc
  t0=$(date +%s)
  timeout --signal=TERM --kill-after=10 "$limit" "$@" >"$LOGS/$name.log" 2>&1
  rc=$?
  local dt=$(($(date +%s) - t0))
  local status=ok
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    status="TIMEOUT after ${limit}s"
  elif [ $rc -ne 0 ]; then
    status="FAILED rc=$rc"
  fi
  printf '%-24s %-22s %5d s\n' "$name" "$status" "$dt" | tee -a "$STEPS"
  if [ $rc -ne 0 ]; then
    FAILED_STEPS+=("$name")
    tail -n 25 "$LOGS/$name.log" | sed 's/^/    /'
  fi
  write_summary
  return $rc
}

# ---------------------------------------------------------------------------------------------------------- info
step nvidia-smi 30 bash -c 'nvidia-smi -L && nvidia-smi --format=csv \
  --query-gpu=name,driver_version,clocks.max.sm,clocks.sm,power.limit,temperature.gpu'

# ---------------------------------------------------------------------------------------------------------- build
# The build folder: the `device` configure preset's binaryDir when there is one, else build-device.
BUILD="${BUILD_DIR:-$ROOT/build-device}"
USE_PRESET=0
if [ -z "${BUILD_DIR:-}" ] && [ -f CMakePresets.json ]; then
  preset_dir=$(python3 - <<'EOF'
import json
presets = {p["name"]: p for p in json.load(open("CMakePresets.json")).get("configurePresets", [])}
def binary_dir(name, seen=()):
    p = presets.get(name)
    if p is None or name in seen:
        return None
    if "binaryDir" in p:
        return p["binaryDir"].replace("${sourceDir}", ".").replace("${presetName}", "device")
    parents = p.get("inherits", [])
    for parent in [parents] if isinstance(parents, str) else parents:
        d = binary_dir(parent, seen + (name,))
        if d:
            return d
    return None
if "device" in presets:
    print(binary_dir("device") or "")
EOF
  )
  if [ -n "$preset_dir" ]; then
    USE_PRESET=1
    case "$preset_dir" in /*) BUILD="$preset_dir" ;; *) BUILD="$ROOT/${preset_dir#./}" ;; esac
  fi
fi

built=0
build() {
  [ $built -eq 1 ] && return 0
  built=2
  if [ $USE_PRESET -eq 1 ]; then
    # shellcheck disable=SC2086
    step configure 300 cmake --preset device ${CMAKE_ARGS:-} || return 1
  else
    # shellcheck disable=SC2086
    step configure 300 cmake -S . -B "$BUILD" -G Ninja -DFLASHATTN_CUDA_ARCHITECTURES=90-real ${CMAKE_ARGS:-} ||
      return 1
  fi
  step build 540 cmake --build "$BUILD" -j "$JOBS" || return 1
  built=1
}

if wants build || wants tests || wants sanitize || wants bench || wants baseline; then build; fi

# ---------------------------------------------------------------------------------------------------------- tests
if wants tests; then
  if [ $built -eq 1 ]; then
    # shellcheck disable=SC2086
    step ctest-gpu 540 ctest --test-dir "$BUILD" -L 'gpu|choosers' -j 2 --output-on-failure --timeout 500 \
      ${CTEST_ARGS:-}
  else
    printf '%-24s SKIPPED (no build)\n' ctest-gpu | tee -a "$STEPS"
  fi
fi

# ---------------------------------------------------------------------------------------------------------- ptx80
if wants ptx80; then
  PTX="$ROOT/build-ptx80"
  if step ptx80-configure 300 cmake -S . -B "$PTX" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DFLASHATTN_CUDA_ARCHITECTURES=80-virtual -DFLASHATTN_HEAD_DIMS=256 -DFLASHATTN_DTYPES=fp16 \
      -DFLASHATTN_BUILD_BENCH=OFF -DFLASHATTN_BUILD_DOCS=OFF &&
    step ptx80-build 540 cmake --build "$PTX" -j "$JOBS" --target test_gpu_decode; then
    step ptx80-decode 300 "$PTX/tests/gpu/test_gpu_decode" --gtest_filter='DecodeSupport.PlansOnlyWhatTheCodeWasCompiledFor'

  fi
fi

# ---------------------------------------------------------------------------------------------------------- sanitize
sanitize_tool() {
  local tool="$1" sanitizer rc=0 exe
  sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  local extra=()
  [ "$tool" = memcheck ] && extra=(--padding 32)
  local exes
  exes=$(find "$BUILD/tests/gpu" -maxdepth 1 -type f -executable -name 'test_gpu_*' 2>/dev/null | sort)
  [ -n "${SANITIZE_FILTER:-}" ] && exes=$(echo "$exes" | grep -E "$SANITIZE_FILTER")
  if [ -z "$exes" ]; then
    echo "no GPU test executables under $BUILD/tests/gpu"
    return 1
  fi
  for exe in $exes; do
    echo "---- $tool $(basename "$exe")"
    FLASHATTN_TEST_SLICE=edge "$sanitizer" --tool "$tool" "${extra[@]}" --error-exitcode 1 "$exe" || {
      rc=1
      echo "---- $tool $(basename "$exe"): FAILED"
    }
  done
  return $rc
}
export -f sanitize_tool
export BUILD SANITIZE_FILTER="${SANITIZE_FILTER:-}"

if wants sanitize; then
  for tool in ${SANITIZE_TOOLS:-memcheck racecheck initcheck synccheck}; do
    if [ $built -eq 1 ]; then
      step "sanitize-$tool" 540 bash -c "sanitize_tool $tool"
    else
      printf '%-24s SKIPPED (no build)\n' "sanitize-$tool" | tee -a "$STEPS"
    fi
  done
fi

# ---------------------------------------------------------------------------------------------------------- peers
if wants peers; then
  if [ -f .peers/peers.py ]; then
    # peers.py has no MLA shapes (PEERS=mla would time its decode rows alone): that sweep has a script of its own.
    peers_script=.peers/peers.py
    [ "$sweep_peers" = mla ] && peers_script=bench/peers_mla.py
    step "peers-$sweep_peers" 540 env PEERS="$sweep_peers" OUT="$OUT" PYTHONPATH="$ROOT/.peers" \
      python3 "${PEERS_SCRIPT:-$peers_script}"
  else
    printf '%-24s SKIPPED (.peers/peers.py missing)\n' "peers-$sweep_peers" | tee -a "$STEPS"
  fi
fi

# ---------------------------------------------------------------------------------------------------------- fa3
if wants fa3; then
  wheel=$(ls .peers/flash_attn3_jax-*.whl 2>/dev/null | head -n 1)
  if [ -f .peers/fa3_jax.py ] && [ -n "$wheel" ]; then
    step fa3-install 120 python3 -m pip install -q --no-index --no-deps --target /tmp/fa3site "$wheel" &&
      step fa3 420 env OUT="$OUT" PYTHONPATH=/tmp/fa3site python3 .peers/fa3_jax.py
  else
    printf '%-24s SKIPPED (.peers/fa3_jax.py or its wheel missing)\n' fa3 | tee -a "$STEPS"
  fi
fi

# ---------------------------------------------------------------------------------------------------------- variants
if wants variants; then
  # shellcheck disable=SC2086
  step variants 540 bash -c "bash bench/forward_sm90_variants/run.sh ${VARIANT_ARGS:-} | tee '$OUT/variants.txt'"
  tail -n 120 "$LOGS/variants.log"
fi

# ---------------------------------------------------------------------------------------------------------- bench
if wants bench; then
  if [ $built -eq 1 ]; then
    # shellcheck disable=SC2086
    step "bench-$sweep_bench" 540 "$BUILD/bench/flashattn-bench" --sweep "$sweep_bench" --json "$OUT/ours.json" \
      ${BENCH_ARGS:-}
    # Without a report, the bench's own table is the result to read (the report prints the joined one).
    wants report || sed -n '/^shape /,$p' "$LOGS/bench-$sweep_bench.log" | head -n 200
  else
    printf '%-24s SKIPPED (no build)\n' "bench-$sweep_bench" | tee -a "$STEPS"
  fi
fi

# ---------------------------------------------------------------------------------------------------------- baseline
if wants baseline; then
  BASE="$ROOT/.baseline/build"
  if [ -f .baseline/source.tar ] && [ $built -eq 1 ]; then
    mkdir -p .baseline/src && tar -xf .baseline/source.tar -C .baseline/src &&
      step baseline-configure 300 cmake -S .baseline/src -B "$BASE" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DFLASHATTN_CUDA_ARCHITECTURES=90-real -DFLASHATTN_BUILD_TESTS=OFF -DFLASHATTN_BUILD_DOCS=OFF &&
      step baseline-build 540 cmake --build "$BASE" -j "$JOBS" --target flashattn-bench &&
      for round in $(seq 1 "${BASELINE_ROUNDS:-2}"); do
        # shellcheck disable=SC2086
        step "bench-new-$round" 400 "$BUILD/bench/flashattn-bench" --sweep "$sweep_bench" --no-check \
          --json "$OUT/new-$round.json" ${BENCH_ARGS:-}
        # shellcheck disable=SC2086
        step "bench-old-$round" 400 "$BASE/bench/flashattn-bench" --sweep "$sweep_bench" --no-check \
          --json "$OUT/old-$round.json" ${BENCH_ARGS:-}
      done
    step baseline-compare 60 python3 bench/compare.py --new "$OUT"/new-*.json --old "$OUT"/old-*.json \
      --markdown "$OUT/baseline.md"
    cat "$LOGS/baseline-compare.log"
    # The device tool returns at most 8 files: the rounds travel as one archive.
    (cd "$OUT" && tar -czf baseline-rounds.tar.gz new-*.json old-*.json 2>/dev/null && rm -f new-*.json old-*.json)
  else
    printf '%-24s SKIPPED (.baseline/source.tar missing or no build)\n' baseline | tee -a "$STEPS"
  fi
fi

# ---------------------------------------------------------------------------------------------------------- report
if wants report; then
  peer_files=(--peers "$OUT/peers.json")
  [ -f "$OUT/fa3.json" ] && peer_files+=(--peers "$OUT/fa3.json")
  step report 60 python3 bench/report.py --ours "$OUT/ours.json" "${peer_files[@]}" --markdown "$OUT/report.md"
  cat "$LOGS/report.log"
fi

write_summary
echo
cat "$SUMMARY"
[ ${#FAILED_STEPS[@]} -eq 0 ]
